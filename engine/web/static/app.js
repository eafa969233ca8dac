// The what-if page. Units: the API's numbers are seconds and bytes (summary.json); shown as
// ms/s, GiB and TFLOP/s. Every figure comes from the server (run-analytical's code path):
// this script only draws, keeps the plan in the URL, pins plans and drives a search.
"use strict";

const $ = (id) => document.getElementById(id);
const GIB = 2 ** 30;
const AXES = ["tp", "pp", "vpp", "cp", "ep", "etp"];
// the form's fields, from /api/meta (engine/web/plan.py FIELDS: one list, the server's), set once in main()
let TEXT_FIELDS = [];
let SWITCHES = [];
const DEFAULT_PLAN = {model: "llama3-8b", system: "h100", num_layers: "", world_size: "8", global_batch: "8",
                      micro_batch: "1", seq_length: "8192", tp: "2", pp: "1", vpp: "1", cp: "1", ep: "1", etp: "",
                      dtype: "bf16", fp8_recipe: "delayed", recompute: "none", sp: true, dist_opt: false, overlap_grad_reduce: false,
                      overlap_param_gather: false, tp_comm_overlap: false, first_stage_layers: "",
                      last_stage_layers: "", pipeline_layout: "", pipeline_schedule: "", moe_token_dispatcher: "",
                      moe_flex_dispatcher_backend: "", overlap_moe_expert_parallel_comm: false};
const COLORS = {compute: "#4e79a7", exposed_tp: "#f28e2b", exposed_cp: "#edc948", exposed_ep: "#b07aa1",
                exposed_etp: "#ff9da7", exposed_dp: "#e15759", exposed_edp: "#9c755f", exposed_pp: "#76b7b2",
                exposed_emb: "#bab0ac", exposed_amax: "#9467bd", bubble: "#d4d4d4", optimizer: "#59a14f", host: "#8cd17d", other: "#86bcb6"};
const HF = "__hf__";
const TYPING_PAUSE_MS = 150;  // about one keystroke gap of a fast typist: no request per digit

let hfText = "";
let sysText = "";
const SYS = "__yaml__";
let seq = 0;
let current = null;      // {plan, answer} of the last good evaluation
let pins = [];           // [{plan, answer}]
let view = null;         // timeline zoom window [t0, t1] in seconds, null = whole
let timer = null;

// text from a URL, a CSV or the server goes into HTML only escaped (a shared link is input)
function esc(v) {
  return String(v).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}

function setState(s) { document.body.dataset.state = s; }

function fmtTime(s) { return s < 1 ? `${(s * 1e3).toFixed(1)} ms` : `${s.toFixed(3)} s`; }
function fmtNum(x, d = 0) { return x.toLocaleString("en-US", {maximumFractionDigits: d, minimumFractionDigits: d}); }
function fmtPct(x) { return `${(x * 100).toFixed(1)}%`; }
function fmtGiB(b) { return `${(b / GIB).toFixed(2)} GiB`; }

async function api(path, body, method) {
  const opts = body === undefined ? {method: method || "GET"} :
    {method: method || "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  const res = await fetch(path, opts);
  let data;
  try { data = await res.json(); } catch (e) { data = {error: `error: the server answered ${res.status}`}; }
  return data;
}

// ---- the plan <-> the form <-> the URL ------------------------------------------------------
function readForm() {
  const plan = {};
  for (const k of TEXT_FIELDS) plan[k] = $(`f-${k}`).value.trim();
  for (const k of SWITCHES) plan[k] = $(`f-${k}`).checked;
  if (plan.model === HF) { delete plan.model; plan.hf_config = hfText; }
  if (plan.system === SYS) { delete plan.system; plan.system_yaml = sysText; }
  if (plan.dtype !== "fp8") delete plan.fp8_recipe;  // the recipe of FP8 training only
  if (plan.moe_token_dispatcher !== "flex") delete plan.moe_flex_dispatcher_backend;  // read by flex only
  return plan;
}

function setOptions(select, values, labels) {
  const keep = select.value;
  select.replaceChildren(...values.map((v, i) => {
    const o = document.createElement("option");
    o.value = String(v); o.textContent = labels ? labels[i] : String(v);
    return o;
  }));
  if (values.map(String).includes(keep)) select.value = keep;
}

function ensureOption(select, value) {
  if (value === undefined || value === null || value === "") return;
  if (![...select.options].some((o) => o.value === String(value))) {
    const o = document.createElement("option");
    o.value = o.textContent = String(value);
    select.appendChild(o);
  }
}

function fillForm(plan) {
  const p = {...DEFAULT_PLAN, ...plan};
  if (p.hf_config) { hfText = p.hf_config; $("f-hf").value = hfText; p.model = HF; }
  if (p.system_yaml) { sysText = p.system_yaml; $("f-sys").value = sysText; p.system = SYS; }
  for (const k of TEXT_FIELDS) {
    const el = $(`f-${k}`);
    if (el.tagName === "SELECT") ensureOption(el, p[k]);
    el.value = p[k] === undefined || p[k] === null ? "" : String(p[k]);
  }
  for (const k of SWITCHES) $(`f-${k}`).checked = p[k] === true || p[k] === "true";
  $("hf-box").hidden = $("f-model").value !== HF;
  $("sys-box").hidden = $("f-system").value !== SYS;
  $("recipe-box").hidden = $("f-dtype").value !== "fp8";
  $("flex-box").hidden = $("f-moe_token_dispatcher").value !== "flex";
}

function planFromUrl() {
  const q = new URLSearchParams(location.search);
  const plan = {};
  for (const k of [...TEXT_FIELDS, "hf_config", "system_yaml"]) if (q.has(k)) plan[k] = q.get(k);
  for (const k of SWITCHES) if (q.has(k)) plan[k] = q.get(k) === "1" || q.get(k) === "true";
  return plan;
}

function urlOf(plan) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(plan)) {
    if (typeof v === "boolean") q.set(k, v ? "1" : "0");
    else if (v !== "" && v !== undefined) q.set(k, v);
  }
  return `${location.pathname}?${q}`;
}

// ---- evaluation ------------------------------------------------------------------------------
function changed(ev, now = false) {
  $("hf-box").hidden = $("f-model").value !== HF;
  $("sys-box").hidden = $("f-system").value !== SYS;
  $("recipe-box").hidden = $("f-dtype").value !== "fp8";
  setState("pending");
  clearTimeout(timer);
  // a pick (select, checkbox) asks at once; typing waits for a pause of TYPING_PAUSE_MS
  const picked = ev && ev.target && (ev.target.tagName === "SELECT" || ev.target.type === "checkbox");
  timer = setTimeout(evaluate, picked || now ? 0 : TYPING_PAUSE_MS);
}

async function evaluate() {
  const plan = readForm();
  history.replaceState(null, "", urlOf(plan));
  const mine = ++seq;
  setState("pending");
  const data = await api("/api/evaluate", {plan});
  if (mine !== seq) return;  // a newer change is on its way
  if (data.error) {
    $("error").textContent = data.error;
    $("error").hidden = false;
    document.querySelector("#answer-pane").classList.add("stale");
    setState("error");
    return;
  }
  $("error").hidden = true;
  document.querySelector("#answer-pane").classList.remove("stale");
  current = {plan, answer: data};
  renderChoices(data.choices, plan, (data.summary.config.model.num_experts || 0) > 0);
  renderAnswer(data);
  renderCompare();
  setState("ready");
}

function renderChoices(choices, plan, moe) {
  $("etp-box").hidden = !moe && !plan.etp;  // the expert layout matters for MoE models only
  $("moe-box").hidden = !moe && !plan.moe_token_dispatcher && !plan.overlap_moe_expert_parallel_comm;
  $("flex-box").hidden = plan.moe_token_dispatcher !== "flex";
  $("pp-box").hidden = Number(plan.pp || 1) <= 1 && !plan.first_stage_layers && !plan.last_stage_layers
    && !plan.pipeline_layout && !plan.pipeline_schedule;  // how layers split over stages: a pipeline's only
  for (const axis of AXES) {
    const ok = choices[axis].filter((c) => c.error === null).map((c) => String(c.value));
    if (plan[axis] && !ok.includes(String(plan[axis]))) ok.push(String(plan[axis]));
    ok.sort((a, b) => Number(a) - Number(b));
    if (axis === "etp") {
      setOptions($("f-etp"), ["", ...ok], ["= TP", ...ok]);
      $("f-etp").value = String(plan.etp || "");
    } else {
      setOptions($(`f-${axis}`), ok);
      $(`f-${axis}`).value = String(plan[axis] || "1");
    }
    const bad = choices[axis].filter((c) => c.error !== null);
    $(`f-${axis}`).title = bad.length ? `not offered:\n${bad.map((c) => `${c.value}: ${c.error}`).join("\n")}` : "";
  }
}

function metric(id, value, text) {
  const el = $(id);
  el.textContent = text;
  el.dataset.value = value === null || value === undefined ? "" : String(value);
}

function renderAnswer(data) {
  const s = data.summary;
  metric("m-step", s.iteration_time_s, fmtTime(s.iteration_time_s));
  metric("m-tps", s.tokens_per_s, fmtNum(s.tokens_per_s));
  metric("m-tflops", s.tflops_per_gpu, s.tflops_per_gpu === null ? "-" : fmtNum(s.tflops_per_gpu, 1));
  metric("m-mfu", s.mfu, s.mfu === null ? "-" : fmtPct(s.mfu));
  $("notes").replaceChildren(...data.notes.map((line) => {
    const d = document.createElement("div");
    d.textContent = line;
    d.className = line.startsWith("warning:") ? "warn" : "";
    return d;
  }));
  // the breakdown bar: shares of the iteration on the critical stage
  const total = s.iteration_time_s;
  const parts = Object.entries(s.breakdown_s).filter(([, v]) => v > 0);
  $("breakdown").replaceChildren(...parts.map(([k, v]) => {
    const d = document.createElement("div");
    d.style.width = `${(100 * v) / total}%`;
    d.style.background = COLORS[k] || "#999";
    d.title = `${k}: ${fmtTime(v)} (${fmtPct(v / total)})`;
    d.dataset.key = k;
    d.dataset.value = String(v);
    return d;
  }));
  $("breakdown-legend").replaceChildren(...parts.map(([k, v]) => {
    const d = document.createElement("span");
    d.innerHTML = `<i style="background:${COLORS[k] || "#999"}"></i>`;
    d.append(`${k} ${fmtTime(v)} (${fmtPct(v / total)})`);
    return d;
  }));
  // memory per stage against the GPU's capacity (summary.json's fits / memory_margin_bytes)
  const cap = s.gpu_memory_bytes;
  const margins = s.memory_margin_bytes || [];
  const worst = margins.length ? Math.min(...margins) : 0;
  // at the edge: within the memory model's error of the capacity, either side (summary.json's
  // memory_verdict, workload_gen/core/memory_fit.py): it may or may not fit
  const edge = s.memory_verdict === "edge";
  $("fits").textContent = s.fits === null ? "" : s.fits ?
    `fits${edge ? " AT THE EDGE (within the memory model's error: it may not)" : ""}: ` +
      `${fmtGiB(worst)} to spare on the fullest stage (GPU has ${fmtGiB(cap)})` :
    `${edge ? "AT THE EDGE (within the memory model's error: it may fit)" : "DOES NOT FIT"}: ` +
      `short by ${fmtGiB(-worst)} (GPU has ${fmtGiB(cap)})`;
  $("fits").className = s.fits === false || edge ? "bad" : "muted";
  $("fits").dataset.fits = String(s.fits);
  const most = Math.max(cap, ...s.reserved_memory_bytes.map((r, i) => cap - margins[i]));
  $("memory").replaceChildren(...s.reserved_memory_bytes.map((r, i) => {
    const need = cap - margins[i];   // reserved + the CUDA context: the fit rule's figure
    const row = document.createElement("div");
    row.className = "memrow";
    row.innerHTML = `<span class="lab">stage ${i}</span><span class="track"><span class="fill"></span>` +
      `<span class="cap"></span></span><span class="num"></span>`;
    row.querySelector(".fill").style.width = `${(100 * need) / most}%`;
    row.querySelector(".fill").classList.toggle("over", margins[i] < 0);
    row.querySelector(".cap").style.left = `${(100 * cap) / most}%`;
    row.querySelector(".num").textContent =
      `${fmtGiB(s.peak_memory_bytes[i])} allocated, ${fmtGiB(need)} needed` +
      (margins[i] < 0 ? ` (short by ${fmtGiB(-margins[i])})` : "");
    return row;
  }));
  const cov = s.compute_coverage || {};
  const shares = ["measured", "scaled", "estimated", "imported"].filter((k) => cov[k] > 0)
    .map((k) => `${k} ${fmtPct(cov[k])}`);
  $("coverage").textContent = `compute times: ${shares.join(", ") || "-"}` +
    (cov.measured ? "" : " (roofline estimates calibrated per GPU; run-analytical --profile DB uses measured times)");
  $("x-cli").value = data.command;
  $("x-megatron").value = data.megatron;
  $("x-yaml").value = data.yaml;
  view = null;
  drawTimeline();
}

// ---- the timeline (canvas: one lane per rank and stream) --------------------------------------
const LABEL_W = 110, LANE_H = 22, AXIS_H = 18;

function drawTimeline() {
  const c = $("timeline");
  const tl = current && current.answer.timeline;
  const lanes = tl ? tl.lanes.length : 0;
  const cssW = c.clientWidth || 600;
  const cssH = AXIS_H + Math.max(1, lanes) * LANE_H + 4;
  const dpr = window.devicePixelRatio || 1;
  c.style.height = `${cssH}px`;
  c.width = Math.round(cssW * dpr); c.height = Math.round(cssH * dpr);
  const g = c.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, cssW, cssH);
  g.font = "12px system-ui, sans-serif";
  if (!tl || !tl.rows.length) return;
  const [t0, t1] = view || [0, tl.end_s];
  const W = cssW - LABEL_W - 4;
  const x = (t) => LABEL_W + ((t - t0) / (t1 - t0)) * W;
  g.fillStyle = "#333";
  tl.lanes.forEach((name, i) => g.fillText(name, 4, AXIS_H + i * LANE_H + 15));
  g.save();
  g.beginPath(); g.rect(LABEL_W, 0, W, cssH); g.clip();
  for (const [lane, s, e, cat] of tl.rows) {
    if (e < t0 || s > t1) continue;
    const a = x(s), b = Math.max(x(e), a + 0.5);
    g.fillStyle = colorOf(cat);
    g.fillRect(a, AXIS_H + lane * LANE_H + 3, b - a, LANE_H - 6);
  }
  // time axis: about eight ticks
  g.fillStyle = "#555";
  const step = niceStep((t1 - t0) / 8);
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    g.fillRect(x(t), AXIS_H - 4, 1, 4);
    g.fillText(fmtTime(t), x(t) + 2, 12);
  }
  g.restore();
}

function colorOf(cat) {
  const map = {gemm: "#4e79a7", attention: "#2f5d8a", elementwise: "#7fa6cf", tp: "#f28e2b", dp: "#e15759",
               pp: "#76b7b2", cp: "#edc948", ep: "#b07aa1", optimizer: "#59a14f"};
  return map[cat] || "#6b8fb8";
}

function niceStep(raw) {
  const p = 10 ** Math.floor(Math.log10(raw));
  for (const m of [1, 2, 5, 10]) if (raw <= m * p) return m * p;
  return 10 * p;
}

function setupTimeline() {
  const c = $("timeline");
  const span = () => view || [0, current.answer.timeline.end_s];
  c.addEventListener("wheel", (ev) => {
    if (!current) return;
    ev.preventDefault();
    const [t0, t1] = span();
    const W = c.clientWidth - LABEL_W - 4;
    const at = t0 + Math.max(0, Math.min(1, (ev.offsetX - LABEL_W) / W)) * (t1 - t0);
    const k = ev.deltaY < 0 ? 0.8 : 1.25;
    view = [at - (at - t0) * k, at + (t1 - at) * k];
    drawTimeline();
  }, {passive: false});
  let drag = null;
  c.addEventListener("mousedown", (ev) => { if (current) drag = {x: ev.clientX, v: span()}; });
  window.addEventListener("mouseup", () => { drag = null; });
  window.addEventListener("mousemove", (ev) => {
    if (!drag) return;
    const W = c.clientWidth - LABEL_W - 4;
    const dt = ((ev.clientX - drag.x) / W) * (drag.v[1] - drag.v[0]);
    view = [drag.v[0] - dt, drag.v[1] - dt];
    drawTimeline();
  });
  c.addEventListener("dblclick", () => { view = null; drawTimeline(); });
  c.addEventListener("mousemove", (ev) => {  // what is under the pointer, below the canvas
    if (!current || drag) return;
    const tl = current.answer.timeline;
    const [t0, t1] = span();
    const lane = Math.floor((ev.offsetY - AXIS_H) / LANE_H);
    const t = t0 + ((ev.offsetX - LABEL_W) / (c.clientWidth - LABEL_W - 4)) * (t1 - t0);
    const hit = tl.rows.find(([l, s, e]) => l === lane && s <= t && t <= e);
    $("tl-tip").textContent = hit ? `${tl.lanes[lane]}: ${tl.names[hit[4]]} (${hit[3]}), micro-batch ${hit[5]}, ` +
      `${fmtTime(hit[2] - hit[1])} from ${fmtTime(hit[1])}` : "\u00a0";
  });
  window.addEventListener("resize", drawTimeline);
}

// ---- compare ---------------------------------------------------------------------------------
const COMPARE_ROWS = [
  ["step time", (s) => s.iteration_time_s, fmtTime, -1],
  ["tokens/s", (s) => s.tokens_per_s, (v) => fmtNum(v), 1],
  ["TFLOP/s per GPU", (s) => s.tflops_per_gpu, (v) => fmtNum(v, 1), 1],
  ["MFU", (s) => s.mfu, fmtPct, 1],
  ["peak reserved, fullest stage", (s) => Math.max(...s.reserved_memory_bytes), fmtGiB, -1],
  ["fits", (s) => (s.memory_verdict === "edge" ? "edge" : s.fits),
    (v) => (v === null || v === undefined ? "-" : v === "edge" ? "at the edge" : v ? "yes" : "NO"), 0],
];

function planLabel(plan, other) {
  // fields the plan sets (an FP8 recipe only with fp8) that differ from the other plan's
  const keys = [...TEXT_FIELDS, ...SWITCHES].filter((k) => plan[k] !== undefined &&
    String(plan[k]) !== String(other ? other[k] : undefined));
  const pick = other ? keys : ["model", "tp", "pp", "cp", "ep"];
  return pick.map((k) => `${k} ${plan[k] === true ? "on" : plan[k] === false ? "off" : plan[k]}`).join(", ") || "same plan";
}

function renderCompare() {
  const t = $("compare");
  $("compare-hint").hidden = pins.length > 0;
  if (!pins.length || !current) { t.replaceChildren(); return; }
  const cols = [{name: "current", entry: current}, ...pins.map((p, i) => ({name: `pin ${i + 1}`, entry: p}))];
  let html = "<thead><tr><th></th>" + cols.map((c, i) =>
    `<th>${c.name}${i ? ` <button class="unpin" data-i="${i - 1}" title="remove">x</button>` +
      ` <button class="load" data-i="${i - 1}" title="load into the form">load</button>` : ""}</th>`).join("") +
    "</tr><tr><td class=\"muted\">differs in</td>" + cols.map((c, i) =>
    `<td class="muted small">${esc(i ? planLabel(c.entry.plan, current.plan) : planLabel(c.entry.plan))}</td>`).join("") +
    "</tr></thead><tbody>";
  for (const [name, get, fmt, better] of COMPARE_ROWS) {
    const base = get(current.answer.summary);
    html += `<tr><th>${name}</th>` + cols.map((c, i) => {
      const v = get(c.entry.answer.summary);
      let delta = "";
      if (i && typeof v === "number" && typeof base === "number" && base) {
        const d = (v - base) / Math.abs(base);
        const cls = better === 0 || Math.abs(d) < 5e-4 ? "" : (d * better > 0 ? "good" : "bad");
        delta = ` <span class="delta ${cls}">${d >= 0 ? "+" : ""}${(d * 100).toFixed(1)}%</span>`;
      }
      return `<td data-col="${i}" data-value="${v}">${v === null || v === undefined ? "-" : fmt(v)}${delta}</td>`;
    }).join("") + "</tr>";
  }
  t.innerHTML = html + "</tbody>";
  t.querySelectorAll(".unpin").forEach((b) => b.addEventListener("click", () => {
    pins.splice(Number(b.dataset.i), 1); renderCompare();
  }));
  t.querySelectorAll(".load").forEach((b) => b.addEventListener("click", () => {
    fillForm(pins[Number(b.dataset.i)].plan); changed(null, true);
  }));
}

// ---- search ----------------------------------------------------------------------------------
let searchRows = [];
let searchSort = {key: "tokens_per_s", dir: -1};
const SEARCH_COLS = [["rank", "#"], ["layout", "layout"], ["iteration_time_s", "step time"],
                     ["tokens_per_s", "tokens/s"], ["mfu", "MFU"], ["reserved_memory_bytes", "reserved"]];

async function searchStart() {
  const data = await api("/api/search", {plan: readForm()});
  if (data.error) { $("search-status").textContent = data.error; return; }
  $("search-start").disabled = true; $("search-cancel").disabled = false;
  pollSearch();
}

async function pollSearch() {
  const s = await api("/api/search");
  $("search-progress").max = Math.max(1, s.total); $("search-progress").value = s.done;
  const pane = $("search-pane");
  pane.dataset.state = s.state;
  if (s.state === "running") {
    $("search-status").textContent = s.total ? `simulating layout ${s.done} of ${s.total} that fit` :
      "enumerating layouts and estimating their memory";
    setTimeout(pollSearch, 250);
    return;
  }
  $("search-start").disabled = false; $("search-cancel").disabled = true;
  if (s.state === "cancelled") { $("search-status").textContent = "cancelled"; return; }
  if (s.state === "failed") { $("search-status").textContent = s.error; return; }
  const r = s.result;
  $("search-status").textContent = `${r.enumerated} layouts enumerated, ${r.invalid} invalid, ${r.over_memory} over ` +
    `the ${fmtGiB(r.capacity_bytes)} the allocator may use, ${r.simulated} simulated` +
    (r.pruned ? ` (${r.pruned} skipped: slower than the top ${r.layouts.length} on compute alone)` : "") +
    ` in ${s.elapsed_s.toFixed(1)} s`;
  const reasons = Object.entries(r.invalid_reasons).sort((a, b) => b[1] - a[1]);
  $("search-reasons").innerHTML = reasons.length ? "<b>rejected:</b> " : "";
  $("search-reasons").append(...reasons.map(([why, n]) => {
    const d = document.createElement("div"); d.textContent = `${n} x ${why}`; return d;
  }));
  searchRows = r.layouts;
  renderSearch();
}

function renderSearch() {
  const {key, dir} = searchSort;
  const rows = [...searchRows].sort((a, b) => (a[key] > b[key] ? 1 : a[key] < b[key] ? -1 : 0) * dir);
  const fmt = {iteration_time_s: fmtTime, tokens_per_s: (v) => fmtNum(v), mfu: (v) => (v === null ? "-" : fmtPct(v)),
               reserved_memory_bytes: fmtGiB};
  const t = $("search-table");
  t.innerHTML = "<thead><tr>" + SEARCH_COLS.map(([k, n]) =>
    `<th data-key="${k}" class="sortable">${n}${k === key ? (dir > 0 ? " ▲" : " ▼") : ""}</th>`).join("") +
    "<th></th></tr></thead><tbody>" + rows.map((r) => "<tr>" + SEARCH_COLS.map(([k]) =>
      `<td>${esc(fmt[k] ? fmt[k](r[k]) : r[k])}</td>`).join("") +
      `<td><button class="use" data-rank="${r.rank}">load</button></td></tr>`).join("") + "</tbody>";
  t.querySelectorAll("th.sortable").forEach((th) => th.addEventListener("click", () => {
    searchSort = {key: th.dataset.key, dir: th.dataset.key === key ? -dir : 1};
    renderSearch();
  }));
  t.querySelectorAll("button.use").forEach((b) => b.addEventListener("click", () => {
    const r = searchRows.find((x) => String(x.rank) === b.dataset.rank);
    fillForm({...readForm(), ...r.plan});
    changed(null, true);
  }));
}

// ---- sweep results (a sweep's CSV, read here in the browser) ----------------------------------
let sweep = null;  // {columns, rows}

function parseCsv(text) {
  // RFC 4180: quoted fields may hold commas, quotes ("") and newlines (sweep's reasons do)
  const rows = [];
  let row = [], field = "", quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i++; }
      else if (c === '"') quoted = false;
      else field += c;
    } else if (c === '"') quoted = true;
    else if (c === ",") { row.push(field); field = ""; }
    else if (c === "\n" || c === "\r") {
      if (c === "\r" && text[i + 1] === "\n") i++;
      row.push(field); field = "";
      if (row.length > 1 || row[0] !== "") rows.push(row);
      row = [];
    } else field += c;
  }
  if (field !== "" || row.length) { row.push(field); rows.push(row); }
  const [columns, ...body] = rows;
  return {columns, rows: body.map((r) => Object.fromEntries(columns.map((c, i) => [c, r[i] ?? ""])))};
}

function isTime(metric) { return metric === "iteration_time_s" || metric.startsWith("breakdown_s."); }
function lowerIsBetter(metric) { return isTime(metric) || metric.endsWith("_bytes"); }

function openSweep(text) {
  sweep = parseCsv(text);
  const cols = sweep.columns;
  const numeric = cols.filter((c) => sweep.rows.some((r) => r[c] !== "" && !Number.isNaN(Number(r[c]))));
  const metrics = numeric.filter((c) => /^(iteration_time_s|tokens_per_s|tflops_per_gpu|mfu|peak_memory_bytes|reserved_memory_bytes|breakdown_s\.)/.test(c));
  // the axes: columns that vary and are not results
  const axes = cols.filter((c) => !metrics.includes(c) && !/^(status|reason|coverage\.)/.test(c) &&
    new Set(sweep.rows.map((r) => r[c])).size > 1);
  setOptions($("sweep-x"), axes);
  setOptions($("sweep-y"), axes);
  setOptions($("sweep-metric"), metrics);
  if (axes.length > 1) $("sweep-y").value = axes[1];
  if (metrics.includes("tokens_per_s")) $("sweep-metric").value = "tokens_per_s";
  drawSweep();
}

function sortValues(values) {
  const nums = values.every((v) => v !== "" && !Number.isNaN(Number(v)));
  return [...values].sort((a, b) => (nums ? Number(a) - Number(b) : a.localeCompare(b)));
}

function drawSweep() {
  if (!sweep) return;
  const x = $("sweep-x").value, y = $("sweep-y").value, m = $("sweep-metric").value;
  const xs = sortValues([...new Set(sweep.rows.map((r) => r[x]))]);
  const ys = sortValues([...new Set(sweep.rows.map((r) => r[y]))]);
  const low = lowerIsBetter(m);
  const cells = new Map();  // "x|y" -> {best, reason}
  for (const r of sweep.rows) {
    const key = `${r[x]}|${r[y]}`;
    const cell = cells.get(key) || {best: null, reason: "", points: 0};
    cell.points++;
    const v = Number(r[m]);
    if (r.status === "ok" && r[m] !== "" && !Number.isNaN(v)) {
      if (cell.best === null || (low ? v < cell.best : v > cell.best)) cell.best = v;
    } else if (!cell.reason) cell.reason = r.reason || r.status;
    cells.set(key, cell);
  }
  const vals = [...cells.values()].map((c) => c.best).filter((v) => v !== null);
  const lo = Math.min(...vals), hi = Math.max(...vals);
  const fmt = (v) => (m === "mfu" ? fmtPct(v) : m.endsWith("_bytes") ? fmtGiB(v) : isTime(m) ? fmtTime(v) :
    fmtNum(v, v < 100 ? 2 : 0));
  let html = `<thead><tr><th>${esc(y)} \\ ${esc(x)}</th>` + xs.map((v) => `<th>${esc(v)}</th>`).join("") +
    "</tr></thead><tbody>";
  for (const yv of ys) {
    html += `<tr><th>${esc(yv)}</th>`;
    for (const xv of xs) {
      const c = cells.get(`${xv}|${yv}`);
      if (!c) { html += "<td class=\"none\"></td>"; continue; }
      if (c.best === null) {
        html += `<td class="invalid" data-x="${esc(xv)}" data-y="${esc(yv)}" title="${esc(c.reason || "invalid")}">` +
          "invalid</td>";
        continue;
      }
      const t = hi > lo ? (c.best - lo) / (hi - lo) : 1;
      const good = low ? 1 - t : t;  // green is better
      const bg = `hsl(${Math.round(good * 120)}, 55%, ${88 - 18 * good}%)`;
      html += `<td data-x="${esc(xv)}" data-y="${esc(yv)}" data-value="${c.best}" style="background:${bg}"` +
        ` title="${c.points} point(s)">${fmt(c.best)}</td>`;
    }
    html += "</tr>";
  }
  $("sweep-table").innerHTML = html + "</tbody>";
  const ok = sweep.rows.filter((r) => r.status === "ok").length;
  $("sweep-info").textContent = `${sweep.rows.length} points, ${ok} ok; ${m}: ${low ? "lower" : "higher"} is better`;
}

// ---- start -----------------------------------------------------------------------------------
async function main() {
  setState("loading");
  const [meta, running] = await Promise.all([api("/api/meta"), api("/api/search")]);
  TEXT_FIELDS = meta.fields.filter((f) => f.kind === "text").map((f) => f.key);
  SWITCHES = meta.fields.filter((f) => f.kind === "switch").map((f) => f.key);
  setOptions($("f-model"), [...meta.models, HF], [...meta.models, "Hugging Face config.json…"]);
  setOptions($("f-system"), [...meta.systems, SYS], [...meta.systems, "system YAML…"]);
  setOptions($("f-dtype"), meta.dtypes);
  setOptions($("f-recompute"), meta.recomputes);
  setOptions($("f-fp8_recipe"), meta.fp8_recipes);
  setOptions($("f-moe_token_dispatcher"), ["", ...meta.dispatchers], ["default (alltoall)", ...meta.dispatchers]);
  setOptions($("f-moe_flex_dispatcher_backend"), ["", ...meta.flex_backends],
             ["default (deepep)", ...meta.flex_backends]);
  for (const a of AXES) setOptions($(`f-${a}`), a === "etp" ? [""] : ["1"], a === "etp" ? ["= TP"] : undefined);
  fillForm(planFromUrl());
  $("plan").addEventListener("submit", (ev) => ev.preventDefault());  // Enter in a field: no reload
  $("plan").addEventListener("input", changed);
  $("plan").addEventListener("change", changed);
  $("f-hf").addEventListener("input", () => { hfText = $("f-hf").value; changed(); });
  $("f-sys").addEventListener("input", () => { sysText = $("f-sys").value; changed(); });
  $("sys-file").addEventListener("change", async () => {
    const f = $("sys-file").files[0];
    if (f) { sysText = await f.text(); $("f-sys").value = sysText; changed(null, true); }
  });
  $("hf-file").addEventListener("change", async () => {
    const f = $("hf-file").files[0];
    if (f) { hfText = await f.text(); $("f-hf").value = hfText; changed(); }
  });
  $("flags-fill").addEventListener("click", async () => {
    setState("pending");
    const data = await api("/api/flags", {text: $("flags-text").value});
    if (data.error) { $("error").textContent = data.error; $("error").hidden = false; setState("error"); return; }
    fillForm({...readForm(), ...data.plan});
    const missing = data.not_on_form || [];
    $("flags-note").textContent = missing.length
      ? "not on the form, so not in this plan (run-analytical reads them): " + missing.join(", ") : "";
    $("flags-note").hidden = !missing.length;
    changed(null, true);
  });
  $("pin").addEventListener("click", () => { if (current) { pins.push(current); renderCompare(); } });
  $("copy-link").addEventListener("click", async () => {
    const link = location.href;
    try { await navigator.clipboard.writeText(link); $("status").textContent = "link copied"; }
    catch (e) { $("status").textContent = link; }
  });
  $("search-start").addEventListener("click", searchStart);
  $("search-cancel").addEventListener("click", () => api("/api/search", undefined, "DELETE"));
  setupTimeline();
  $("sweep-file").addEventListener("change", async () => {
    const f = $("sweep-file").files[0];
    if (f) openSweep(await f.text());
  });
  for (const id of ["sweep-x", "sweep-y", "sweep-metric"]) $(id).addEventListener("change", drawSweep);
  if (running.state === "running") { $("search-start").disabled = true; $("search-cancel").disabled = false; pollSearch(); }
  await evaluate();
}

main();
