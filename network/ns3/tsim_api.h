// trainsim ns-3 core: all that Python sees of it. Sim owns one World (tsim.cpp) and
// forwards to it; this header names no ns-3 type, so that Python can use a core compiled
// ahead of time (a shared library in the user's cache, network/ns3/runtime.py) after
// parsing only this file and tsim_params.h: parsing ns-3's headers is most of the start-up
// that the cache removes. tsim.cpp defines the methods (out of line, so that a compiled
// library exports them); compiled in memory instead, the same definitions are JIT-compiled.
//
// Units: seconds (double) at the API, bits/s for rates, bytes for sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tsim_params.h"

namespace tsim
{

class World;

// One simulation (see World in tsim.cpp for what each call does). Only one exists at a
// time: ns-3's simulator is process-wide.
class Sim
{
  public:
    Sim();
    ~Sim();
    Sim(const Sim&) = delete;
    Sim& operator=(const Sim&) = delete;

    // ---------------- building: set P, then Init, AddLink per link, SetNextHopsBulk, Start
    Params& P();
    void Init(uint32_t nHosts, uint32_t nSwitches, uint32_t gpn, uint32_t servers);
    uint32_t AddLink(uint32_t a, uint32_t b, double bps, double delay, double kminBytes, double kmaxBytes,
                     double pmax);
    void SetLinkErrorRate(uint32_t link, double rate);
    void SetNextHopsBulk(uint32_t node, const int32_t* ptr, const uint32_t* ifs);
    void Start();

    // ---------------- flows and clock
    int32_t AddTransfer(int32_t transferId, size_t n, const uint32_t* src, const uint32_t* dst,
                        const double* bytes, const int32_t* parPtr, const int32_t* parIdx,
                        const uint8_t* fluidFlag, double startDelay);
    void RunUntil(double t);
    bool Yielded() const;
    void SetStopOnTransfer(bool stop);
    double YieldBudgetS() const;
    void SetYieldBudgetS(double seconds);
    uint64_t Yields() const;
    uint64_t WallChecks() const;
    double Now() const;
    uint64_t EventCount() const;
    double LowerBoundNextCompletion() const;
    size_t PendingTransfers() const;

    // ---------------- results
    size_t NumDone() const;
    int32_t DoneId(size_t i) const;
    double DoneTime(size_t i) const;
    void ConsumeDone();
    uint64_t FlowsDone() const;
    uint64_t BytesDone() const;
    uint64_t NetBytesDone() const;
    uint64_t IpDrops() const;
    void FlowTable(std::vector<double>& out) const;
    void LinkTable(std::vector<double>& out) const;
    // Bytes delivered so far, per flow (network flows; 0 for fluid ones).
    void FlowReceived(std::vector<double>& out) const;
    // The RDMA transport's totals over every queue pair (retransmissions, NACKs, ...).
    const RdmaTotals& Rdma() const;

  private:
    World* world_;
};

// Frees ns-3's simulator state (Simulator::Destroy), before a new Sim or at the end.
void DestroySimulator();

} // namespace tsim
