// trainsim's packet-level network core, compiled at run time by cppyy against ns-3 3.44
// (network/ns3/runtime.py). This is the file the loader compiles: it includes the other
// parts and defines World, which orchestrates them, and Sim (tsim_api.h), the handle on
// a World that is all Python sees.
//
// Why C++: the Python/ns-3 boundary is expensive (a cppyy call costs microseconds, and
// ns.MakeCallback on Python functions does not work), so everything that happens per
// packet or per flow lives here. Python only builds the fabric, hands over whole
// collectives (arrays of flows with parents) and reads results back in bulk.
//
// The parts, split as ns-3 splits its modules: models (what a device, a switch or an
// algorithm does with packets) apart from the helper that builds and wires them. Each
// includes the parts it uses.
//   tsim_common.h   constants, Params, RdmaTag, Flow, FlowEvents, FlowRegistry
//   models:
//   tsim_routing.h  EcmpRouting: per-flow ECMP
//   tsim_link.h     LinkStat: a link direction's counters and sub-ns serialisation clock
//   tsim_device.h   LinkDevice, LinkChannel: the point-to-point link, PointToPointNetDevice's
//                   events with less work per packet
//   tsim_switch.h   SwitchMmu (shared buffer, PFC), EcnQueueDisc (egress port: ECN, INT)
//   tsim_cc.h       QpState, CongestionControl, LossRecovery: a queue pair's pieces
//   tsim_dcqcn.h    Dcqcn: DCQCN's notification and reaction points
//   tsim_hpcc.h     Hpcc: HPCC's window from INT telemetry
//   tsim_gbn.h      GoBackN: go-back-N loss recovery (reliable mode)
//   tsim_nvlink.h   NvlinkFluid: max-min fair fluid model of intra-server NVLink flows
//   helper:
//   tsim_fabric.h   Fabric: nodes, links, switch models installed and wired, routing tables
//   transports (built on the fabric):
//   tsim_rdma.h     RdmaTransport: RoCE-like NICs and queue pairs driving the pieces above
//   tsim_tcp.h      TcpTransport: one ns-3 DCTCP connection per flow
//   tsim.cpp        World: flow bookkeeping (dependency graph, transfers), clock, results
//
// Units: seconds (double) at the API, bits/s for rates, bytes for sizes.
#include "tsim_api.h"
#include "tsim_common.h"
#include "tsim_fabric.h"
#include "tsim_nvlink.h"
#include "tsim_rdma.h"
#include "tsim_tcp.h"

namespace tsim
{

inline void
DoStop()
{
    Simulator::Stop();
}

// One simulation. Python sets P, calls Init, AddLink per link, SetNextHopsBulk per node
// and Start, then hands over collectives (AddTransfer) and runs the clock (RunUntil).
// Flows form a dependency graph: a flow starts when its parents are done (or, for the
// next chunk on the same connection, sent); a transfer (one collective) is done when all
// its flows are.
class World : public FlowEvents
{
  public:
    World()
        : rdma(P, fabric, flows, *this),
          tcp(fabric, flows, *this),
          nvlink(P, flows, *this)
    {
    }

    Params P;
    Fabric fabric;
    FlowRegistry flows;
    RdmaTransport rdma;
    TcpTransport tcp;
    NvlinkFluid nvlink;
    std::vector<uint16_t> nextPort; // per host: the next source port to hand out

    // Transfers (collectives), by dense index in order of AddTransfer.
    std::vector<int32_t> flowsLeft;        // flows not yet delivered
    std::vector<int32_t> engineTransferId; // the engine's id of the transfer
    // Completed transfers, in completion order; Python reads those after doneConsumed.
    std::vector<int32_t> doneTransferIds;  // engine ids
    std::vector<double> doneTransferTime;  // s
    size_t doneConsumed{0};

    std::unordered_set<int32_t> activeFlows; // started, unfinished flows
    uint64_t flowsDone{0};
    uint64_t bytesDone{0};
    uint64_t netBytesDone{0}; // bytes of network (non-fluid) flows
    EventId stopEvent;
    double stopTarget{-1.0};  // s: the time stopEvent stops at
    bool stopOnTransfer{true};
    // Wall-clock yield: a long RunUntil returns to Python every ~budget seconds of wall time
    // (yielded = true, nothing else changed), so Python can act on Ctrl-C; the caller runs
    // again. The check is an ns-3 event whose simulated period adapts (doubles while checks
    // come faster than 5 ms of wall time, halves above 50 ms) up to 2 us (a 512-GPU fabric
    // simulates ~10 us per wall second). It runs only while flows are in flight: a stretch
    // without flows has few events and passes quickly, so it schedules no checks at all.
    double yieldBudgetS{0.2};
    bool yielded{false};
    uint64_t yields{0}; // how often RunUntil handed control back early
    uint64_t wallChecks{0}; // CheckWallClock events so far (their number depends on wall time)
    double checkPeriodS{1e-6};
    EventId checkEvent;
    bool running{false}; // inside RunUntil's Simulator::Run
    std::chrono::steady_clock::time_point runStart, lastCheck;

    // ---------------- building ----------------
    // ns-3's event queue. Every scheduler pops events in the same (time, insertion) order,
    // so the choice changes nothing simulated; the binary heap of PriorityQueueScheduler
    // allocates nothing per event and took 75-105 ns per insert and pop with 2,000-20,000
    // events pending, against 124-190 ns for the default MapScheduler (a red-black tree).
    // It is only slower at Simulator::Remove, which nothing here calls (EventId::Cancel
    // marks an event; the queue drops it when its time comes).
    std::string schedulerType{"ns3::PriorityQueueScheduler"};

    void Init(uint32_t nHosts, uint32_t nSwitches, uint32_t gpn, uint32_t servers)
    {
        {
            ObjectFactory sched;
            sched.SetTypeId(schedulerType);
            Simulator::SetScheduler(sched);
        }
        RngSeedManager::SetSeed(1);
        RngSeedManager::SetRun(1);
        fabric.P = &P;
        fabric.CreateNodes(nHosts, nSwitches);
        SetTcpDefaults(P);
        fabric.InstallStack();
        rdma.Init(nHosts);
        nextPort.assign(nHosts, 10000);
        nvlink.Init(servers, gpn);
    }

    // See Fabric::AddLink (bits/s, s, bytes, packets).
    uint32_t AddLink(uint32_t a,
                     uint32_t b,
                     double bps,
                     double delay,
                     double kminBytes,
                     double kmaxBytes,
                     double pmax)
    {
        return fabric.AddLink(a, b, bps, delay, kminBytes, kmaxBytes, pmax, P.mtu);
    }

    void SetNextHopsBulk(uint32_t node, const int32_t* ptr, const uint32_t* ifs)
    {
        fabric.SetNextHopsBulk(node, ptr, ifs);
    }

    // After the last link: count IP drops, open every host's receivers.
    void Start()
    {
        fabric.WatchIpDrops();
        fabric.hostPause = [this](uint32_t host, bool pause) { rdma.SetPaused(host, pause); };
        for (uint32_t h = 0; h < fabric.numHosts; h++)
        {
            rdma.StartHost(h);
            if (P.transport == 1)
            {
                tcp.StartHost(h);
            }
        }
    }

    // ---------------- flows ----------------
    // Adds one collective's flows (local indices 0..n-1, parents given in CSR form over
    // local indices) and starts those without parents now, or startDelay s from now.
    // Returns the first global id.
    int32_t AddTransfer(int32_t transferId,
                        size_t n,
                        const uint32_t* src,
                        const uint32_t* dst,
                        const double* bytes,
                        const int32_t* parPtr,
                        const int32_t* parIdx,
                        const uint8_t* fluidFlag,
                        double startDelay)
    {
        int32_t base = int32_t(flows.all.size());
        int32_t dense = int32_t(flowsLeft.size());
        flowsLeft.push_back(int32_t(n));
        engineTransferId.push_back(transferId);
        for (size_t i = 0; i < n; i++)
        {
            Flow f;
            f.src = src[i];
            f.dst = dst[i];
            f.bytes = uint64_t(std::llround(bytes[i]));
            f.transfer = dense;
            f.fluid = fluidFlag[i] != 0;
            f.pending = parPtr[i + 1] - parPtr[i];
            // A network flow takes its source port now, in the collective's flow order, not
            // when it starts: its ECMP path is then fixed by the collective, not by which of
            // two flows starting in the same nanosecond the scheduler ran first (the flow
            // backend, network/flow/network.py, allocates the same ports).
            if (!f.fluid && f.bytes > 0 && f.src != f.dst)
            {
                f.srcPort = AllocPort(f.src);
            }
            flows.all.push_back(f);
        }
        for (size_t i = 0; i < n; i++)
        {
            Flow& child = flows.all[base + i];
            for (int32_t k = parPtr[i]; k < parPtr[i + 1]; k++)
            {
                Flow& par = flows.all[base + parIdx[k]];
                // A chunk that follows another on the same connection only waits for the
                // sender to finish pushing its predecessor (NCCL keeps several chunks in
                // flight per connection); any other dependency waits for delivery.
                if (!child.fluid && !par.fluid && par.src == child.src && par.dst == child.dst)
                {
                    par.sendChildren.push_back(base + int32_t(i));
                }
                else
                {
                    par.children.push_back(base + int32_t(i));
                }
            }
        }
        if (n == 0)
        {
            TransferDone(dense);
        }
        for (size_t i = 0; i < n; i++)
        {
            if (flows.all[base + i].pending == 0)
            {
                if (startDelay > 0)
                {
                    Simulator::Schedule(CeilTime(startDelay), &World::StartFlow, this, base + int32_t(i));
                }
                else
                {
                    StartFlow(base + int32_t(i));
                }
            }
        }
        return base;
    }

    // Starts a flow whose parents are done: zero-byte and loopback flows finish at once,
    // fluid flows join the NVLink model after its latency, network flows get a source
    // port and go to the transport.
    void StartFlow(int32_t id)
    {
        Flow& f = flows[id];
        f.start = Simulator::Now().GetSeconds();
        activeFlows.insert(id);
        ArmWallClockCheck();
        if (f.bytes == 0 || (f.src == f.dst && !f.fluid))
        {
            Simulator::ScheduleNow(&World::FlowDone, this, id);
            return;
        }
        if (f.fluid)
        {
            Simulator::Schedule(Seconds(P.nvlinkLatency), &NvlinkFluid::Add, &nvlink, id);
            return;
        }
        uint16_t port = f.srcPort;
        while (flows.bySourcePort.count(SourcePortKey(f.src, port)))
        {
            // its port is still held by a live flow 55,000 allocations back: take the next
            port = port >= 65000 ? 10000 : port + 1;
        }
        f.srcPort = port;
        flows.bySourcePort[SourcePortKey(f.src, port)] = id;
        if (P.transport == 0)
        {
            rdma.StartFlow(id, port);
        }
        else
        {
            tcp.StartFlow(id, port);
        }
    }

    uint16_t AllocPort(uint32_t host)
    {
        // Ports cycle through 10000..65000; a port is reused only after 55000 later
        // flows from the same host, long after its flow finished.
        uint16_t p = nextPort[host];
        nextPort[host] = p >= 65000 ? 10000 : p + 1;
        return p;
    }

    // The sender has handed the flow's last byte to its NIC (RDMA) or socket (TCP):
    // the next chunks on the same connection start.
    void FlowSent(int32_t id) override
    {
        Flow& f = flows[id];
        if (f.sent)
        {
            return;
        }
        f.sent = true;
        std::vector<int32_t> kids;
        kids.swap(f.sendChildren);
        for (int32_t c : kids)
        {
            if (--flows[c].pending == 0)
            {
                StartFlow(c);
            }
        }
    }

    // The flow is delivered: its dependants start, and its transfer may be done.
    void FlowDone(int32_t id) override
    {
        Flow& f = flows[id];
        if (f.finish >= 0)
        {
            return;
        }
        f.finish = Simulator::Now().GetSeconds();
        activeFlows.erase(id);
        FlowSent(id); // a delivered flow is sent (fluid and zero-byte flows get here first)
        flowsDone++;
        bytesDone += f.bytes;
        if (!f.fluid)
        {
            netBytesDone += f.bytes;
            flows.bySourcePort.erase(SourcePortKey(f.src, f.srcPort));
        }
        for (int32_t c : f.children)
        {
            if (--flows[c].pending == 0)
            {
                StartFlow(c);
            }
        }
        if (--flowsLeft[f.transfer] == 0)
        {
            TransferDone(f.transfer);
        }
    }

    void TransferDone(int32_t dense)
    {
        doneTransferIds.push_back(engineTransferId[dense]);
        doneTransferTime.push_back(Simulator::Now().GetSeconds());
        if (stopOnTransfer)
        {
            Simulator::Stop();
        }
    }

    // ---------------- clock ----------------
    // Runs until time t (seconds) or, if stopOnTransfer, until a transfer completes.
    // Returns early with yielded set after ~yieldBudgetS of wall time (see above); the
    // stop event of an unfinished call is kept, so events at exactly t keep their order.
    void RunUntil(double t)
    {
        double now = Simulator::Now().GetSeconds();
        yielded = false;
        if (t > now)
        {
            if (!(stopEvent.IsPending() && stopTarget == t))
            {
                stopEvent.Cancel();
                stopEvent = Simulator::Schedule(CeilTime(t - now), &DoStop);
                stopTarget = t;
            }
            runStart = lastCheck = std::chrono::steady_clock::now();
            running = true;
            ArmWallClockCheck();
            Simulator::Run();
            running = false;
            checkEvent.Cancel();
            if (!yielded)
            {
                stopEvent.Cancel();
            }
        }
    }

    void ArmWallClockCheck()
    {
        if (running && !activeFlows.empty() && !checkEvent.IsPending())
        {
            checkEvent = Simulator::Schedule(Seconds(checkPeriodS), &World::CheckWallClock, this);
        }
    }

    void CheckWallClock()
    {
        wallChecks++;
        auto wall = std::chrono::steady_clock::now();
        if (std::chrono::duration<double>(wall - runStart).count() > yieldBudgetS)
        {
            yielded = true;
            yields++;
            Simulator::Stop();
            return;
        }
        double since = std::chrono::duration<double>(wall - lastCheck).count();
        lastCheck = wall;
        if (since < 0.005)
        {
            checkPeriodS = std::min(checkPeriodS * 2, 2e-6);
        }
        else if (since > 0.05)
        {
            checkPeriodS = std::max(checkPeriodS / 2, 1e-9);
        }
        ArmWallClockCheck(); // none while no flow is in flight; StartFlow arms it again
    }

    // Events ns-3 has executed since the simulation began (cancelled ones included).
    uint64_t EventCount() const
    {
        return Simulator::GetEventCount();
    }

    double Now() const
    {
        return Simulator::Now().GetSeconds();
    }

    // A lower bound on the next transfer completion: every active flow of a transfer
    // must still deliver its remaining bytes at no more than its bottleneck port rate.
    double LowerBoundNextCompletion() const
    {
        double now = Simulator::Now().GetSeconds();
        std::unordered_map<int32_t, double> lb;
        std::unordered_map<int32_t, double> fluidRem;
        nvlink.RemainingBytes(now, fluidRem);
        for (int32_t i : activeFlows)
        {
            const Flow& f = flows[i];
            double rem, rate;
            if (f.fluid)
            {
                auto it = fluidRem.find(i);
                rem = it == fluidRem.end() ? 0.0 : it->second; // 0 while in its start latency
                rate = P.nvlinkBps / 8.0;
            }
            else
            {
                // A packet already on the last wire lands sooner than a full packet time.
                rem = double(f.bytes) - double(f.rcvd) - double(P.mtu);
                rate = std::min(fabric.hostLineBps[f.src], fabric.hostLineBps[f.dst]) / 8.0;
            }
            double t = now + std::max(0.0, rem) / rate;
            auto it = lb.find(f.transfer);
            if (it == lb.end() || t > it->second)
            {
                lb[f.transfer] = t;
            }
        }
        double best = 1e300;
        for (auto& kv : lb)
        {
            best = std::min(best, kv.second);
        }
        return best;
    }

    size_t PendingTransfers() const
    {
        size_t n = 0;
        for (int32_t left : flowsLeft)
        {
            n += left > 0;
        }
        return n;
    }

    // ---------------- results, read in bulk ----------------
    size_t NumDone() const
    {
        return doneTransferIds.size() - doneConsumed;
    }

    int32_t DoneId(size_t i) const
    {
        return doneTransferIds[doneConsumed + i];
    }

    double DoneTime(size_t i) const
    {
        return doneTransferTime[doneConsumed + i];
    }

    void ConsumeDone()
    {
        doneConsumed = doneTransferIds.size();
    }

    void FlowTable(std::vector<double>& out) const
    {
        // per flow: src, dst, bytes, start, finish, fluid
        out.clear();
        out.reserve(flows.all.size() * 6);
        for (const Flow& f : flows.all)
        {
            out.push_back(f.src);
            out.push_back(f.dst);
            out.push_back(double(f.bytes));
            out.push_back(f.start);
            out.push_back(f.finish);
            out.push_back(f.fluid ? 1.0 : 0.0);
        }
    }

    void LinkTable(std::vector<double>& out) const
    {
        // per link direction: Fabric::kLinkColumns numbers (see Fabric::LinkTable)
        fabric.LinkTable(out);
    }

    // Packets IPv4 dropped anywhere (no route, TTL): 0 in a healthy run.
    uint64_t IpDrops() const
    {
        return fabric.ipDrops;
    }
};

// ---------------- Sim: the boundary Python sees (tsim_api.h), forwarding to World
Sim::Sim()
    : world_(new World())
{
}

Sim::~Sim()
{
    delete world_;
}

Params&
Sim::P()
{
    return world_->P;
}

void
Sim::Init(uint32_t nHosts, uint32_t nSwitches, uint32_t gpn, uint32_t servers)
{
    world_->Init(nHosts, nSwitches, gpn, servers);
}

uint32_t
Sim::AddLink(uint32_t a, uint32_t b, double bps, double delay, double kminBytes, double kmaxBytes, double pmax)
{
    return world_->AddLink(a, b, bps, delay, kminBytes, kmaxBytes, pmax);
}

void
Sim::SetLinkErrorRate(uint32_t link, double rate)
{
    world_->fabric.SetLinkErrorRate(link, rate);
}

void
Sim::SetNextHopsBulk(uint32_t node, const int32_t* ptr, const uint32_t* ifs)
{
    world_->SetNextHopsBulk(node, ptr, ifs);
}

void
Sim::Start()
{
    world_->Start();
}

int32_t
Sim::AddTransfer(int32_t transferId,
                 size_t n,
                 const uint32_t* src,
                 const uint32_t* dst,
                 const double* bytes,
                 const int32_t* parPtr,
                 const int32_t* parIdx,
                 const uint8_t* fluidFlag,
                 double startDelay)
{
    return world_->AddTransfer(transferId, n, src, dst, bytes, parPtr, parIdx, fluidFlag, startDelay);
}

void
Sim::RunUntil(double t)
{
    world_->RunUntil(t);
}

bool
Sim::Yielded() const
{
    return world_->yielded;
}

void
Sim::SetStopOnTransfer(bool stop)
{
    world_->stopOnTransfer = stop;
}

double
Sim::YieldBudgetS() const
{
    return world_->yieldBudgetS;
}

void
Sim::SetYieldBudgetS(double seconds)
{
    world_->yieldBudgetS = seconds;
}

uint64_t
Sim::Yields() const
{
    return world_->yields;
}

uint64_t
Sim::WallChecks() const
{
    return world_->wallChecks;
}

double
Sim::Now() const
{
    return world_->Now();
}

uint64_t
Sim::EventCount() const
{
    return world_->EventCount();
}

double
Sim::LowerBoundNextCompletion() const
{
    return world_->LowerBoundNextCompletion();
}

size_t
Sim::PendingTransfers() const
{
    return world_->PendingTransfers();
}

size_t
Sim::NumDone() const
{
    return world_->NumDone();
}

int32_t
Sim::DoneId(size_t i) const
{
    return world_->DoneId(i);
}

double
Sim::DoneTime(size_t i) const
{
    return world_->DoneTime(i);
}

void
Sim::ConsumeDone()
{
    world_->ConsumeDone();
}

uint64_t
Sim::FlowsDone() const
{
    return world_->flowsDone;
}

uint64_t
Sim::BytesDone() const
{
    return world_->bytesDone;
}

uint64_t
Sim::NetBytesDone() const
{
    return world_->netBytesDone;
}

uint64_t
Sim::IpDrops() const
{
    return world_->IpDrops();
}

void
Sim::FlowTable(std::vector<double>& out) const
{
    world_->FlowTable(out);
}

void
Sim::LinkTable(std::vector<double>& out) const
{
    world_->LinkTable(out);
}

void
Sim::FlowReceived(std::vector<double>& out) const
{
    out.clear();
    out.reserve(world_->flows.all.size());
    for (const Flow& f : world_->flows.all)
    {
        out.push_back(double(f.rcvd));
    }
}

const RdmaTotals&
Sim::Rdma() const
{
    return world_->rdma.totals;
}

void
DestroySimulator()
{
    Simulator::Destroy();
}

} // namespace tsim
