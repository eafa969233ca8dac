// trainsim ns-3 core: the plain records crossing to Python: the parameters it hands over
// (Params, with the congestion-control numbering) and the RDMA transport's totals it reads
// back (RdmaTotals). Free of ns-3 headers on purpose: tsim_api.h (what Python sees of a compiled
// core) includes it, and Python must be able to parse that without ns-3's headers (the
// parsing is the start-up cost that a cached core avoids, network/ns3/runtime.py).
//
// Units: seconds (double) for times, bits/s for rates, bytes for sizes.
#pragma once

#include <cstdint>

namespace tsim
{

// Congestion controls, numbered as params.CONGESTION_CONTROLS lists them ("dcqcn", "hpcc").
constexpr int kCcDcqcn = 0;
constexpr int kCcHpcc = 1;

// Parameters handed over from Python (network/ns3/params.py documents each one).
struct Params
{
    int transport{0};              // 0 = rdma (paced UDP + DCQCN or HPCC), 1 = dctcp
    uint32_t mtu{9000};            // IP MTU, bytes
    double nvlinkBps{0};           // fluid model: per-GPU NVLink port rate, bits/s
    double nvlinkLatency{0};       // fluid model: start-up latency per flow, s
    double cnpInterval{4e-6};      // receiver: min gap between CNPs of one flow, s
    double rateDecreaseInterval{4e-6};
    double alphaInterval{1e-6};    // ALPHA_RESUME_INTERVAL
    double rpTimer{900e-6};        // RP_TIMER: rate increase period
    double g{1.0 / 256};           // EWMA_GAIN
    int fastRecoveryTimes{1};
    uint64_t byteCounter{32768};   // bytes sent per byte-counter stage
    double rateAi{50e6};           // bits/s
    double rateHai{100e6};
    double minRate{100e6};
    uint32_t tcpBuffer{4 << 20};
    // switch MMU and PFC (params.py documents each one)
    bool ecn{true};                // switches mark CE at egress
    bool pfc{true};                // lossless class pauses hop by hop
    double bufferBytes{32e6};      // shared buffer per switch
    double dtAlpha{8.0};         // dynamic threshold: an ingress port may hold alpha x free buffer
    double xonOffsetBytes{18060};  // XON once an ingress port is this far below its threshold
    double headroomExtraBytes{0};  // added to every port's computed headroom
    // congestion control and reliability (params.py documents each one)
    int cc{kCcDcqcn};              // kCcDcqcn or kCcHpcc (params.py CONGESTION_CONTROLS order)
    bool ecnAtDequeue{true};       // switches mark CE as packets leave the egress queue
    bool clampTargetRate{false};   // DCQCN: Rt <- Rc on every cut (else only after a timer increase)
    bool reliable{false};          // per-packet ACKs, NACK and go-back-N (HPCC, lossy links)
    double hpccEta{0.95};          // HPCC target utilisation
    int hpccMaxStage{5};           // HPCC additive-increase stages before a multiplicative update
    double hpccRateAiFraction{4e-4}; // HPCC W_AI as a fraction of the NIC line rate (x base RTT)
    uint32_t hpccIntBytes{42};     // HPCC: INT header bytes each data packet reserves (5 hops)
    double rto{1e-3};              // go-back-N: retransmit from the last ACK after this long without one
    double nackInterval{100e-6};   // receiver: min gap between NACKs asking for the same byte
};

// Totals over every queue pair of a run (read by tests and reports as RdmaTransport::totals).
struct RdmaTotals
{
    uint64_t retxBytes{0};     // payload bytes sent again after a NACK or timeout
    uint64_t timeouts{0};      // go-back-N rewinds by timeout
    uint64_t nacksReceived{0};
    uint64_t oooDropped{0};    // data packets the receivers discarded (out of order)
    uint64_t cuts{0};          // DCQCN rate cuts
    uint64_t ctrlForClosedQp{0}; // CNPs, ACKs, NACKs that reached a delivered queue pair (dropped)
};

} // namespace tsim
