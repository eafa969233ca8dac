"""SimAI 1.7 ratio tables (public SimAI data, see README.md)."""
