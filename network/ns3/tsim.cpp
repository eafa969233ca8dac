// trainsim's packet-level network core, compiled at run time by cppyy against ns-3 3.44.
//
// Why C++: the Python/ns-3 boundary is expensive (a cppyy call costs microseconds, and
// ns.MakeCallback on Python functions does not work), so everything that happens per
// packet or per flow lives here: routing (per-flow ECMP), the RDMA NIC with DCQCN, the
// TCP flow driver, the NVLink fluid model and the flow dependency graph. Python only
// builds the fabric, hands over whole collectives (arrays of flows with parents) and
// reads results back in bulk.
//
// Units: seconds (double) at the API, bits/s for rates, bytes for sizes.
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <unordered_set>
#include <functional>
#include <map>
#include <unordered_map>
#include <vector>

namespace tsim
{
using namespace ns3;

static const uint32_t kBaseAddr = 0x0A000001; // host h has address 10.0.0.1 + h
static const uint16_t kRdmaPort = 4791;       // RoCEv2's UDP port, for the receivers
static const uint16_t kTcpPort = 5001;
static const uint32_t kSwitch = 0xFFFFFFFFu; // fluid flows: the node's NVSwitch as an end (NVLS)

// ns-3 keeps time in integer nanoseconds: delays are rounded UP to the next nanosecond so
// that an event never fires before the moment it waits for (rounding down would re-arm
// the same event at the same instant forever).
inline Time
CeilTime(double seconds)
{
    return NanoSeconds(int64_t(std::ceil(seconds * 1e9 - 1e-6)));
}

inline uint64_t
Mix64(uint64_t x)
{
    // splitmix64 finaliser: a cheap, well-spread hash for ECMP choices.
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

// ---------------------------------------------------------------------------------------
// Routing: every node knows, per destination host, the interfaces on a shortest path.
// A packet's choice among them is a hash of its 5-tuple (addresses, ports; the protocol
// is implied by the port) salted with the node id: per-flow ECMP, as switches do it.
// Tables are computed in Python (BFS) and installed with SetNextHops.
class EcmpRouting : public Ipv4RoutingProtocol
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("tsim::EcmpRouting")
                                .SetParent<Ipv4RoutingProtocol>()
                                .SetGroupName("Internet");
        return tid;
    }

    uint32_t m_salt{0};
    int32_t m_host{-1}; // host index for hosts, -1 for switches
    Ptr<Ipv4> m_ipv4;
    std::vector<std::vector<uint32_t>> m_next; // dst host -> interface indices
    std::vector<Ptr<Ipv4Route>> m_routes;      // per interface, reused
    uint32_t m_singleIf{0};                    // hosts with one NIC skip the table

    Ptr<Ipv4Route> RouteFor(uint32_t iface, Ipv4Address src)
    {
        if (m_routes.size() <= iface)
        {
            m_routes.resize(iface + 1);
        }
        if (!m_routes[iface])
        {
            Ptr<Ipv4Route> r = Create<Ipv4Route>();
            r->SetGateway(Ipv4Address::GetZero());
            r->SetOutputDevice(m_ipv4->GetNetDevice(iface));
            r->SetSource(src);
            m_routes[iface] = r;
        }
        return m_routes[iface];
    }

    uint32_t Choose(uint32_t dstHost, uint64_t key) const
    {
        if (dstHost >= m_next.size() || m_next[dstHost].empty())
        {
            return 0;
        }
        const auto& v = m_next[dstHost];
        if (v.size() == 1)
        {
            return v[0];
        }
        return v[Mix64(key ^ (uint64_t(m_salt) << 40)) % v.size()];
    }

    static uint64_t FlowKey(Ptr<const Packet> p, const Ipv4Header& h)
    {
        uint8_t ports[4] = {0, 0, 0, 0};
        if (p && p->GetSize() >= 4)
        {
            p->CopyData(ports, 4); // UDP and TCP both start with src port, dst port
        }
        uint64_t k = (uint64_t(h.GetSource().Get()) << 32) | h.GetDestination().Get();
        k = Mix64(k) ^ (uint64_t(ports[0]) << 24 | uint64_t(ports[1]) << 16 |
                        uint64_t(ports[2]) << 8 | ports[3]);
        return k;
    }

    Ptr<Ipv4Route> RouteOutput(Ptr<Packet> p,
                               const Ipv4Header& header,
                               Ptr<NetDevice> oif,
                               Socket::SocketErrno& sockerr) override
    {
        if (m_host < 0)
        {
            sockerr = Socket::ERROR_NOROUTETOHOST;
            return nullptr;
        }
        uint32_t dst = header.GetDestination().Get() - kBaseAddr;
        uint32_t iface = m_singleIf;
        if (!m_next.empty())
        {
            iface = Choose(dst, FlowKey(p, header));
        }
        sockerr = Socket::ERROR_NOTERROR;
        return RouteFor(iface, Ipv4Address(kBaseAddr + uint32_t(m_host)));
    }

    bool RouteInput(Ptr<const Packet> p,
                    const Ipv4Header& header,
                    Ptr<const NetDevice> idev,
                    const UnicastForwardCallback& ucb,
                    const MulticastForwardCallback& mcb,
                    const LocalDeliverCallback& lcb,
                    const ErrorCallback& ecb) override
    {
        uint32_t dst = header.GetDestination().Get() - kBaseAddr;
        if (m_host >= 0)
        {
            if (dst == uint32_t(m_host))
            {
                lcb(p, header, m_ipv4->GetInterfaceForDevice(idev));
                return true;
            }
            return false; // hosts never forward
        }
        if (dst >= m_next.size() || m_next[dst].empty())
        {
            return false;
        }
        uint32_t iface = Choose(dst, FlowKey(p, header));
        ucb(RouteFor(iface, Ipv4Address::GetZero()), p, header);
        return true;
    }

    void NotifyInterfaceUp(uint32_t) override
    {
    }

    void NotifyInterfaceDown(uint32_t) override
    {
    }

    void NotifyAddAddress(uint32_t, Ipv4InterfaceAddress) override
    {
    }

    void NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress) override
    {
    }

    void SetIpv4(Ptr<Ipv4> ipv4) override
    {
        m_ipv4 = ipv4;
    }

    void PrintRoutingTable(Ptr<OutputStreamWrapper>, Time::Unit) const override
    {
    }
};

class EcmpRoutingHelper : public Ipv4RoutingHelper
{
  public:
    Ipv4RoutingHelper* Copy() const override
    {
        return new EcmpRoutingHelper(*this);
    }

    Ptr<Ipv4RoutingProtocol> Create(Ptr<Node>) const override
    {
        return CreateObject<EcmpRouting>();
    }
};

// ---------------------------------------------------------------------------------------
// Parameters handed over from Python (network/ns3/params.py documents each one).
struct Params
{
    int transport{0};              // 0 = rdma (paced UDP + DCQCN), 1 = dctcp
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
};

struct Flow
{
    uint32_t src{0}, dst{0};
    uint64_t bytes{0};
    int32_t transfer{-1};
    int32_t pending{0}; // parents not yet finished
    std::vector<int32_t> children;     // start when this flow has been delivered
    std::vector<int32_t> sendChildren; // same connection, next chunk: start once this one is sent
    bool fluid{false};
    bool sent{false};
    double start{-1}, finish{-1};
    uint64_t rcvd{0};
    uint16_t srcPort{0};
};

struct LinkStat
{
    uint64_t txBytes{0};
    uint32_t peakQueue{0};
    uint64_t drops{0};

    void OnTx(Ptr<const Packet> p)
    {
        txBytes += p->GetSize();
    }

    void OnQueue(uint32_t, uint32_t now)
    {
        if (now > peakQueue)
        {
            peakQueue = now;
        }
    }

    void OnDrop(Ptr<const QueueDiscItem>)
    {
        drops++;
    }

    void OnDevDrop(Ptr<const Packet>)
    {
        drops++;
    }
};

// ---------------------------------------------------------------------------------------
// Switch egress queue: FIFO that marks ECN-capable packets (CE) with probability rising
// linearly from 0 at Kmin to Pmax at Kmax bytes of instantaneous queue, and 1 above Kmax
// (DCQCN's RED-style marking; Kmin = Kmax gives DCTCP's step). It never drops: packets that
// are not ECN-capable (TCP handshakes, pure ACKs) pass unmarked, and the buffer is deep,
// which is what a PFC-protected RoCE fabric guarantees. ns-3's RED would drop those.
class EcnQueueDisc : public QueueDisc
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid =
            TypeId("tsim::EcnQueueDisc").SetParent<QueueDisc>().SetGroupName("TrafficControl");
        return tid;
    }

    EcnQueueDisc()
        : QueueDisc(QueueDiscSizePolicy::NO_LIMITS)
    {
        m_uv = CreateObject<UniformRandomVariable>();
    }

    double m_kmin{0}, m_kmax{0}, m_pmax{1};
    uint32_t m_limitPkts{1000000};
    Ptr<UniformRandomVariable> m_uv;

    void SetStream(int64_t s)
    {
        m_uv->SetStream(s);
    }

  private:
    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        double q = double(GetInternalQueue(0)->GetNBytes());
        double p = q < m_kmin ? 0.0 : (q >= m_kmax ? 1.0 : m_pmax * (q - m_kmin) / (m_kmax - m_kmin));
        if (p > 0 && (p >= 1.0 || m_uv->GetValue() < p))
        {
            Mark(item, "ecn threshold");
        }
        bool ok = GetInternalQueue(0)->Enqueue(item);
        return ok;
    }

    Ptr<QueueDiscItem> DoDequeue() override
    {
        return GetInternalQueue(0)->Dequeue();
    }

    bool CheckConfig() override
    {
        if (GetNInternalQueues() == 0)
        {
            Ptr<InternalQueue> q = CreateObject<DropTailQueue<QueueDiscItem>>();
            q->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, m_limitPkts));
            AddInternalQueue(q);
        }
        return true;
    }

    void InitializeParams() override
    {
    }
};

class World;

inline void
DoStop()
{
    Simulator::Stop();
}

// ---------------------------------------------------------------------------------------
// RDMA-like NIC: one per host. Queue pairs (one per flow) are served round-robin at no
// more than the line rate, each no faster than its own DCQCN rate: a NIC never queues
// more than a packet in its own device, so all queueing (and ECN marking) happens in the
// switches, as with RoCE.
struct Qp
{
    int32_t flow{-1};
    Ptr<Socket> sock;
    uint64_t sent{0};
    double rc{0}, rt{0}, alpha{1.0};
    double nextAvail{0};
    double lastDecrease{-1};
    bool cnpSeen{false};
    int stage{0};   // timer stages since the last cut (DCQCN's T)
    int bcStage{0}; // byte-counter stages since the last cut (DCQCN's BC)
    uint64_t bcBytes{0};
    EventId alphaTimer, rateTimer;
    double lastCnpSent{-1}; // receiver side, keyed by the same flow
};

class RdmaNic
{
  public:
    World* m_world{nullptr};
    uint32_t m_host{0};
    double m_lineBps{0};
    std::vector<Qp*> m_active;
    size_t m_rr{0};
    EventId m_tick;
    double m_busyUntil{0};
    bool m_dirty{false};

    void Kick();
    void Tick();
};

class World
{
  public:
    Params P;
    NodeContainer nodes;
    uint32_t numHosts{0};
    uint32_t firstNodeId{0};
    uint32_t gpusPerNode{1};
    std::vector<double> hostLineBps; // host -> NIC rate
    std::vector<LinkStat*> stats;    // 2 per link (a->b, b->a)
    std::vector<std::pair<uint32_t, uint32_t>> linkEnds;
    std::vector<Ptr<EcmpRouting>> routing;
    std::vector<RdmaNic> nics;
    std::vector<uint16_t> nextPort;
    std::vector<Ptr<Socket>> rdmaRx; // per host
    std::vector<Ptr<Socket>> tcpListen;
    std::unordered_map<uint64_t, int32_t> portToFlow; // (host << 16 | port) -> flow
    std::unordered_map<int32_t, Qp*> qps;
    std::deque<Qp> qpStore; // stable addresses; one per RDMA flow of the run
    std::vector<Flow> flows;
    std::vector<int32_t> transferLeft;
    std::vector<int32_t> transferIds;  // dense index -> engine transfer id
    std::vector<double> doneTransferTime;
    std::vector<int32_t> doneTransfers; // engine ids, in completion order
    size_t doneRead{0};
    std::unordered_set<int32_t> active; // started, unfinished flows
    uint64_t flowsDone{0};
    uint64_t bytesDone{0};
    uint64_t netBytesDone{0};
    EventId stopEvent;
    bool stopOnTransfer{true};

    // fluid model state, per server
    struct FluidFlow
    {
        int32_t flow;
        double rem, rate;
    };

    std::vector<std::vector<FluidFlow>> fluid;
    std::vector<double> fluidLast;
    std::vector<EventId> fluidEvent;

    // ---------------- building ----------------
    void Init(uint32_t nHosts, uint32_t nSwitches, uint32_t gpn, uint32_t servers)
    {
        numHosts = nHosts;
        gpusPerNode = gpn;
        RngSeedManager::SetSeed(1);
        RngSeedManager::SetRun(1);
        nodes.Create(nHosts + nSwitches);
        firstNodeId = nodes.Get(0)->GetId(); // ids restart only after Simulator::Destroy
        Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TcpDctcp::GetTypeId()));
        Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(P.mtu - 52));
        Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(P.tcpBuffer));
        Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(P.tcpBuffer));
        Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
        Config::SetDefault("ns3::TcpSocket::ConnTimeout", TimeValue(MilliSeconds(5)));
        Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(5)));
        // ns-3's 200 ms delayed-ACK timer stalls a DCTCP flow whose window fell to one
        // segment for 200 ms at a time; a datacenter stack acknowledges within microseconds.
        Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MicroSeconds(20)));
        // ns-3 starts the RTO at 1 s until the first RTT sample; a lost SYN-ACK would stall
        // a flow for a whole second of a millisecond-scale iteration.
        Config::SetDefault("ns3::RttEstimator::InitialEstimation", TimeValue(MilliSeconds(1)));
        Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MicroSeconds(10)));
        Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(false));
        Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue("On"));
        Config::SetDefault("ns3::TcpSocketBase::MaxSegLifetime", DoubleValue(1e-3));
        InternetStackHelper stack;
        stack.SetIpv6StackInstall(false);
        EcmpRoutingHelper rh;
        stack.SetRoutingHelper(rh);
        stack.Install(nodes);
        routing.resize(nodes.GetN());
        for (uint32_t i = 0; i < nodes.GetN(); i++)
        {
            Ptr<Ipv4> ip = nodes.Get(i)->GetObject<Ipv4>();
            routing[i] = DynamicCast<EcmpRouting>(ip->GetRoutingProtocol());
            routing[i]->m_salt = i * 2654435761u;
            routing[i]->m_host = i < nHosts ? int32_t(i) : -1;
        }
        hostLineBps.assign(nHosts, 0);
        nics.resize(nHosts);
        nextPort.assign(nHosts, 10000);
        for (uint32_t h = 0; h < nHosts; h++)
        {
            nics[h].m_world = this;
            nics[h].m_host = h;
        }
        fluid.resize(servers);
        fluidLast.assign(servers, 0.0);
        fluidEvent.resize(servers);
    }

    // Adds a full-duplex link; returns its index. Switch egress ports get an ECN-marking
    // queue (Kmin/Kmax in bytes, pmax) deep enough that nothing is dropped.
    uint32_t AddLink(uint32_t a,
                     uint32_t b,
                     double bps,
                     double delay,
                     double kminBytes,
                     double kmaxBytes,
                     double pmax,
                     uint32_t bufferPkts)
    {
        PointToPointHelper p2p;
        p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(bps))));
        p2p.SetDeviceAttribute("Mtu", UintegerValue(P.mtu));
        p2p.SetChannelAttribute("Delay", TimeValue(Seconds(delay)));
        NetDeviceContainer d = p2p.Install(nodes.Get(a), nodes.Get(b));
        uint32_t idx = linkEnds.size();
        linkEnds.push_back({a, b});
        for (int side = 0; side < 2; side++)
        {
            uint32_t n = side == 0 ? a : b;
            Ptr<NetDevice> dev = d.Get(side);
            Ptr<PointToPointNetDevice> pdev = DynamicCast<PointToPointNetDevice>(dev);
            LinkStat* st = new LinkStat();
            stats.push_back(st);
            pdev->TraceConnectWithoutContext("PhyTxBegin", MakeCallback(&LinkStat::OnTx, st));
            Ptr<Ipv4> ip = nodes.Get(n)->GetObject<Ipv4>();
            uint32_t iface = ip->AddInterface(dev);
            if (n < numHosts)
            {
                ip->AddAddress(iface,
                               Ipv4InterfaceAddress(Ipv4Address(kBaseAddr + n), Ipv4Mask("/32")));
                routing[n]->m_singleIf = iface;
                hostLineBps[n] = std::max(hostLineBps[n], bps);
                // Hosts: the TCP sender may burst a window into its own device; keep it.
                pdev->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, 1000000));
                pdev->GetQueue()->TraceConnectWithoutContext(
                    "BytesInQueue",
                    MakeCallback(&LinkStat::OnQueue, st));
                pdev->GetQueue()->TraceConnectWithoutContext(
                    "Drop",
                    MakeCallback(&LinkStat::OnDevDrop, st));
            }
            else
            {
                pdev->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, 2));
                Ptr<EcnQueueDisc> q = CreateObject<EcnQueueDisc>();
                q->m_kmin = kminBytes;
                q->m_kmax = std::max(kmaxBytes, kminBytes + 1.0);
                q->m_pmax = pmax;
                q->m_limitPkts = bufferPkts;
                // a fixed random stream per port, so runs repeat exactly even when several
                // simulations share one process
                q->SetStream(int64_t(2 * idx + side));
                nodes.Get(n)->GetObject<TrafficControlLayer>()->SetRootQueueDiscOnDevice(dev, q);
                QueueDiscContainer qd(q);
                qd.Get(0)->TraceConnectWithoutContext("BytesInQueue",
                                                      MakeCallback(&LinkStat::OnQueue, st));
                qd.Get(0)->TraceConnectWithoutContext("Drop", MakeCallback(&LinkStat::OnDrop, st));
            }
            ip->SetMetric(iface, 1);
            ip->SetUp(iface);
        }
        return idx;
    }

    // Interface index on node n of link l (interfaces are added in link order; 0 is loopback).
    void SetNextHops(uint32_t node, uint32_t dstHost, const std::vector<uint32_t>& ifaces)
    {
        auto& t = routing[node]->m_next;
        if (t.size() < numHosts)
        {
            t.resize(numHosts);
        }
        t[dstHost] = ifaces;
    }

    void SetNextHopsBulk(uint32_t node, const int32_t* ptr, const uint32_t* ifs)
    {
        // ptr has numHosts + 1 entries: the interfaces towards host h are ifs[ptr[h]:ptr[h+1]]
        auto& t = routing[node]->m_next;
        t.assign(numHosts, {});
        for (uint32_t h = 0; h < numHosts; h++)
        {
            t[h].assign(ifs + ptr[h], ifs + ptr[h + 1]);
        }
    }

    uint64_t ipDrops{0};
    std::map<int, uint64_t> ipDropReasons;

    void OnIpDrop(const Ipv4Header&, Ptr<const Packet>, Ipv4L3Protocol::DropReason r, Ptr<Ipv4>, uint32_t)
    {
        ipDrops++;
        ipDropReasons[int(r)]++;
    }

    uint64_t IpDropsFor(int reason)
    {
        return ipDropReasons[reason];
    }

    void Start()
    {
        for (uint32_t i = 0; i < nodes.GetN(); i++)
        {
            nodes.Get(i)->GetObject<Ipv4L3Protocol>()->TraceConnectWithoutContext(
                "Drop",
                MakeCallback(&World::OnIpDrop, this));
        }
        for (uint32_t h = 0; h < numHosts; h++)
        {
            Ptr<Node> n = nodes.Get(h);
            Ptr<Socket> s = Socket::CreateSocket(n, UdpSocketFactory::GetTypeId());
            s->SetIpRecvTos(true);
            s->SetIpTos(0x02);
            s->Bind(InetSocketAddress(Ipv4Address::GetAny(), kRdmaPort));
            s->SetRecvCallback(MakeCallback(&World::RdmaReceive, this));
            rdmaRx.push_back(s);
            nics[h].m_lineBps = hostLineBps[h];
            if (P.transport == 1)
            {
                Ptr<Socket> l = Socket::CreateSocket(n, TcpSocketFactory::GetTypeId());
                l->Bind(InetSocketAddress(Ipv4Address::GetAny(), kTcpPort));
                l->Listen();
                l->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                     MakeCallback(&World::TcpAccept, this));
                tcpListen.push_back(l);
            }
        }
    }

    // ---------------- flows ----------------
    // Adds one collective's flows (local indices 0..n-1, parents given in CSR form over
    // local indices) and starts those without parents now. Returns the first global id.
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
        int32_t base = int32_t(flows.size());
        int32_t dense = int32_t(transferLeft.size());
        transferLeft.push_back(int32_t(n));
        transferIds.push_back(transferId);
        for (size_t i = 0; i < n; i++)
        {
            Flow f;
            f.src = src[i];
            f.dst = dst[i];
            f.bytes = uint64_t(std::llround(bytes[i]));
            f.transfer = dense;
            f.fluid = fluidFlag[i] != 0;
            f.pending = parPtr[i + 1] - parPtr[i];
            flows.push_back(f);
        }
        for (size_t i = 0; i < n; i++)
        {
            Flow& child = flows[base + i];
            for (int32_t k = parPtr[i]; k < parPtr[i + 1]; k++)
            {
                Flow& par = flows[base + parIdx[k]];
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
            if (flows[base + i].pending == 0)
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

    void StartFlow(int32_t id)
    {
        Flow& f = flows[id];
        f.start = Simulator::Now().GetSeconds();
        active.insert(id);
        if (f.bytes == 0 || (f.src == f.dst && !f.fluid))
        {
            Simulator::ScheduleNow(&World::FlowDone, this, id);
            return;
        }
        if (f.fluid)
        {
            Simulator::Schedule(Seconds(P.nvlinkLatency), &World::FluidAdd, this, id);
            return;
        }
        uint16_t port = AllocPort(f.src);
        f.srcPort = port;
        portToFlow[(uint64_t(f.src) << 16) | port] = id;
        Ptr<Node> n = nodes.Get(f.src);
        if (P.transport == 0)
        {
            qpStore.emplace_back();
            Qp* q = &qpStore.back();
            q->flow = id;
            q->rc = q->rt = nics[f.src].m_lineBps;
            q->nextAvail = f.start;
            q->sock = Socket::CreateSocket(n, UdpSocketFactory::GetTypeId());
            q->sock->SetIpTos(0x02);
            q->sock->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
            q->sock->Connect(InetSocketAddress(Ipv4Address(kBaseAddr + f.dst), kRdmaPort));
            q->sock->SetRecvCallback(MakeCallback(&World::RdmaCnp, this));
            qps[id] = q;
            nics[f.src].m_active.push_back(q);
            nics[f.src].Kick();
        }
        else
        {
            Ptr<Socket> s = Socket::CreateSocket(n, TcpSocketFactory::GetTypeId());
            s->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
            s->SetSendCallback(MakeCallback(&World::TcpFill, this));
            s->Connect(InetSocketAddress(Ipv4Address(kBaseAddr + f.dst), kTcpPort));
            tcpSend[PeekPointer(s)] = id;
            tcpSendSock[id] = s;
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

    // The sender has handed the flow's last byte to its NIC (RDMA) or socket (TCP).
    void FlowSent(int32_t id)
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

    void FlowDone(int32_t id)
    {
        Flow& f = flows[id];
        if (f.finish >= 0)
        {
            return;
        }
        f.finish = Simulator::Now().GetSeconds();
        active.erase(id);
        FlowSent(id); // a delivered flow is sent (fluid and zero-byte flows get here first)
        flowsDone++;
        bytesDone += f.bytes;
        if (!f.fluid)
        {
            netBytesDone += f.bytes;
            portToFlow.erase((uint64_t(f.src) << 16) | f.srcPort);
        }
        for (int32_t c : f.children)
        {
            if (--flows[c].pending == 0)
            {
                StartFlow(c);
            }
        }
        if (--transferLeft[f.transfer] == 0)
        {
            TransferDone(f.transfer);
        }
    }

    void TransferDone(int32_t dense)
    {
        doneTransfers.push_back(transferIds[dense]);
        doneTransferTime.push_back(Simulator::Now().GetSeconds());
        if (stopOnTransfer)
        {
            Simulator::Stop();
        }
    }

    // ---------------- RDMA data path ----------------
    void RdmaReceive(Ptr<Socket> s)
    {
        Address from;
        Ptr<Packet> p;
        while ((p = s->RecvFrom(from)))
        {
            InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
            uint32_t srcHost = a.GetIpv4().Get() - kBaseAddr;
            auto it = portToFlow.find((uint64_t(srcHost) << 16) | a.GetPort());
            if (it == portToFlow.end())
            {
                continue;
            }
            int32_t id = it->second;
            Flow& f = flows[id];
            f.rcvd += p->GetSize();
            SocketIpTosTag tos;
            if (p->PeekPacketTag(tos) && (tos.GetTos() & 0x3) == 0x3)
            {
                auto qi = qps.find(id);
                double now = Simulator::Now().GetSeconds();
                if (qi != qps.end() &&
                    (qi->second->lastCnpSent < 0 || now - qi->second->lastCnpSent >= P.cnpInterval))
                {
                    qi->second->lastCnpSent = now;
                    s->SendTo(Create<Packet>(16), 0, from);
                }
            }
            if (f.rcvd >= f.bytes)
            {
                auto qi = qps.find(id);
                if (qi != qps.end())
                {
                    Qp* q = qi->second;
                    q->alphaTimer.Cancel();
                    q->rateTimer.Cancel();
                    q->sock->Close();
                    q->sock = nullptr;
                    q->flow = -1; // the NIC drops it from its list lazily
                    nics[f.src].m_dirty = true;
                    qps.erase(qi);
                }
                FlowDone(id);
            }
        }
    }

    void RdmaCnp(Ptr<Socket> s)
    {
        Ptr<Packet> p;
        while ((p = s->Recv()))
        {
            Address local;
            s->GetSockName(local);
            uint16_t port = InetSocketAddress::ConvertFrom(local).GetPort();
            uint32_t host = s->GetNode()->GetId() - firstNodeId;
            auto it = portToFlow.find((uint64_t(host) << 16) | port);
            if (it == portToFlow.end())
            {
                continue;
            }
            auto qi = qps.find(it->second);
            if (qi == qps.end())
            {
                continue;
            }
            OnCnp(qi->second);
        }
    }

    // DCQCN reaction point (Zhu et al., SIGCOMM 2015), with SimAI.conf's parameter names.
    void OnCnp(Qp* q)
    {
        double now = Simulator::Now().GetSeconds();
        q->cnpSeen = true;
        if (q->lastDecrease >= 0 && now - q->lastDecrease < P.rateDecreaseInterval)
        {
            return;
        }
        q->lastDecrease = now;
        q->rt = q->rc;
        q->alpha = (1 - P.g) * q->alpha + P.g;
        q->rc = std::max(P.minRate, q->rc * (1 - q->alpha / 2));
        q->stage = 0;
        q->bcStage = 0;
        q->bcBytes = 0;
        q->rateTimer.Cancel();
        q->rateTimer = Simulator::Schedule(Seconds(P.rpTimer), &World::RateIncrease, this, q);
        if (!q->alphaTimer.IsPending())
        {
            q->alphaTimer = Simulator::Schedule(Seconds(P.alphaInterval), &World::AlphaUpdate, this, q);
        }
    }

    void AlphaUpdate(Qp* q)
    {
        if (!q->cnpSeen)
        {
            q->alpha = (1 - P.g) * q->alpha;
        }
        q->cnpSeen = false;
        if (q->alpha > 1e-6 || q->rc < nics[flows[q->flow].src].m_lineBps)
        {
            q->alphaTimer = Simulator::Schedule(Seconds(P.alphaInterval), &World::AlphaUpdate, this, q);
        }
    }

    void RateIncrease(Qp* q)
    {
        q->stage++;
        Increase(q);
        double line = nics[flows[q->flow].src].m_lineBps;
        if (q->rc < line)
        {
            q->rateTimer = Simulator::Schedule(Seconds(P.rpTimer), &World::RateIncrease, this, q);
        }
    }

    // One increase event (timer or byte counter): fast recovery while both counters are
    // below F, hyper increase once both exceed it, additive increase in between.
    void Increase(Qp* q)
    {
        double line = nics[flows[q->flow].src].m_lineBps;
        int F = P.fastRecoveryTimes;
        int hi = std::max(q->stage, q->bcStage);
        int lo = std::min(q->stage, q->bcStage);
        if (hi < F)
        {
            // fast recovery: only Rc moves towards Rt
        }
        else if (lo > F)
        {
            q->rt = std::min(line, q->rt + (lo - F) * P.rateHai);
        }
        else
        {
            q->rt = std::min(line, q->rt + P.rateAi);
        }
        q->rc = std::min(line, (q->rt + q->rc) / 2);
    }

    void OnSent(Qp* q, uint32_t bytes)
    {
        if (q->rc >= nics[flows[q->flow].src].m_lineBps)
        {
            return;
        }
        q->bcBytes += bytes;
        if (q->bcBytes >= P.byteCounter)
        {
            q->bcBytes = 0;
            q->bcStage++;
            Increase(q);
        }
    }

    // ---------------- TCP data path ----------------
    std::unordered_map<Socket*, int32_t> tcpSend;
    std::unordered_map<int32_t, Ptr<Socket>> tcpSendSock;
    std::unordered_map<Socket*, int32_t> tcpRecv;
    std::unordered_map<int32_t, uint64_t> tcpSent;

    void TcpFill(Ptr<Socket> s, uint32_t avail)
    {
        auto it = tcpSend.find(PeekPointer(s));
        if (it == tcpSend.end())
        {
            return;
        }
        int32_t id = it->second;
        uint64_t sent = tcpSent[id];
        uint64_t total = flows[id].bytes;
        while (sent < total && s->GetTxAvailable() > 0)
        {
            uint32_t n = uint32_t(std::min<uint64_t>(total - sent, s->GetTxAvailable()));
            int r = s->Send(Create<Packet>(n));
            if (r <= 0)
            {
                break;
            }
            sent += uint64_t(r);
        }
        tcpSent[id] = sent;
        if (sent >= total)
        {
            FlowSent(id);
        }
    }

    void TcpAccept(Ptr<Socket> s, const Address& from)
    {
        InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
        uint32_t srcHost = a.GetIpv4().Get() - kBaseAddr;
        auto it = portToFlow.find((uint64_t(srcHost) << 16) | a.GetPort());
        if (it == portToFlow.end())
        {
            return;
        }
        tcpRecv[PeekPointer(s)] = it->second;
        s->SetRecvCallback(MakeCallback(&World::TcpReceive, this));
    }

    void TcpReceive(Ptr<Socket> s)
    {
        auto it = tcpRecv.find(PeekPointer(s));
        if (it == tcpRecv.end())
        {
            return;
        }
        int32_t id = it->second;
        Flow& f = flows[id];
        Ptr<Packet> p;
        while ((p = s->Recv()))
        {
            f.rcvd += p->GetSize();
        }
        if (f.rcvd >= f.bytes && f.finish < 0)
        {
            tcpRecv.erase(it);
            s->Close();
            auto si = tcpSendSock.find(id);
            if (si != tcpSendSock.end())
            {
                si->second->Close();
                tcpSend.erase(PeekPointer(si->second));
                tcpSendSock.erase(si);
            }
            tcpSent.erase(id);
            FlowDone(id);
        }
    }

    // ---------------- NVLink fluid model ----------------
    // Each GPU has one egress and one ingress NVLink port of P.nvlinkBps; the NVSwitch is
    // non-blocking, so a flow's only constraints are its two ports. Rates are max-min fair
    // (progressive filling), recomputed whenever a flow of the server starts or ends.
    void FluidUpdate(uint32_t server)
    {
        double now = Simulator::Now().GetSeconds();
        double dt = now - fluidLast[server];
        fluidLast[server] = now;
        for (auto& ff : fluid[server])
        {
            ff.rem -= ff.rate * dt;
        }
    }

    void FluidRates(uint32_t server)
    {
        auto& v = fluid[server];
        uint32_t base = server * gpusPerNode;
        std::vector<double> cap(2 * gpusPerNode, P.nvlinkBps / 8.0);
        std::vector<int> users(2 * gpusPerNode, 0);
        std::vector<char> frozen(v.size(), 0);
        // Port index per flow end; an NVSwitch end (NVLS) constrains nothing: -1.
        std::vector<std::pair<int, int>> ports(v.size());
        for (size_t i = 0; i < v.size(); i++)
        {
            const Flow& f = flows[v[i].flow];
            int rs = f.src == kSwitch ? -1 : int(f.src - base);
            int rd = f.dst == kSwitch ? -1 : int(gpusPerNode + f.dst - base);
            ports[i] = {rs, rd};
            v[i].rate = 0;
            if (rs >= 0)
            {
                users[rs]++;
            }
            if (rd >= 0)
            {
                users[rd]++;
            }
        }
        size_t left = v.size();
        while (left > 0)
        {
            double share = 1e300;
            int bott = -1;
            for (size_t r = 0; r < cap.size(); r++)
            {
                if (users[r] > 0 && cap[r] / users[r] < share)
                {
                    share = cap[r] / users[r];
                    bott = int(r);
                }
            }
            if (bott < 0)
            {
                // only switch-to-switch flows left (none in practice): full port rate
                for (size_t i = 0; i < v.size(); i++)
                {
                    if (!frozen[i])
                    {
                        v[i].rate = P.nvlinkBps / 8.0;
                    }
                }
                break;
            }
            for (size_t i = 0; i < v.size(); i++)
            {
                if (frozen[i])
                {
                    continue;
                }
                int rs = ports[i].first;
                int rd = ports[i].second;
                if (rs == bott || rd == bott)
                {
                    frozen[i] = 1;
                    left--;
                    v[i].rate = share;
                    for (int r : {rs, rd})
                    {
                        if (r >= 0)
                        {
                            cap[r] -= share;
                            users[r]--;
                        }
                    }
                }
            }
        }
    }

    void FluidReschedule(uint32_t server)
    {
        FluidRates(server);
        fluidEvent[server].Cancel();
        double best = 1e300;
        for (auto& ff : fluid[server])
        {
            if (ff.rate > 0)
            {
                best = std::min(best, std::max(0.0, ff.rem) / ff.rate);
            }
        }
        if (best < 1e300)
        {
            // Rounded up to the nanosecond, so the finishing flow really has 0 bytes left.
            fluidEvent[server] = Simulator::Schedule(CeilTime(best), &World::FluidTick, this, server);
        }
    }

    uint32_t FluidServer(const Flow& f) const
    {
        return (f.src != kSwitch ? f.src : f.dst) / gpusPerNode;
    }

    void FluidAdd(int32_t id)
    {
        uint32_t server = FluidServer(flows[id]);
        FluidUpdate(server);
        fluid[server].push_back({id, double(flows[id].bytes), 0.0});
        FluidReschedule(server);
    }

    void FluidTick(uint32_t server)
    {
        FluidUpdate(server);
        std::vector<int32_t> done;
        auto& v = fluid[server];
        for (size_t i = 0; i < v.size();)
        {
            // within a byte (or a part per million) counts as done: float residue
            if (v[i].rem <= std::max(1.0, 1e-6 * double(flows[v[i].flow].bytes)))
            {
                done.push_back(v[i].flow);
                v[i] = v.back();
                v.pop_back();
            }
            else
            {
                i++;
            }
        }
        FluidReschedule(server);
        for (int32_t id : done)
        {
            FlowDone(id);
        }
    }

    // ---------------- clock ----------------
    // Runs until time t (seconds) or, if stopOnTransfer, until a transfer completes.
    void RunUntil(double t)
    {
        double now = Simulator::Now().GetSeconds();
        if (t > now)
        {
            stopEvent.Cancel();
            stopEvent = Simulator::Schedule(CeilTime(t - now), &DoStop);
            Simulator::Run();
            stopEvent.Cancel();
        }
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
        for (size_t sv = 0; sv < fluid.size(); sv++)
        {
            for (const auto& ff : fluid[sv])
            {
                fluidRem[ff.flow] = ff.rem - ff.rate * (now - fluidLast[sv]);
            }
        }
        for (int32_t i : active)
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
                rate = std::min(hostLineBps[f.src], hostLineBps[f.dst]) / 8.0;
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
        for (int32_t left : transferLeft)
        {
            n += left > 0;
        }
        return n;
    }

    // ---------------- results, read in bulk ----------------
    size_t NumDone() const
    {
        return doneTransfers.size() - doneRead;
    }

    int32_t DoneId(size_t i) const
    {
        return doneTransfers[doneRead + i];
    }

    double DoneTime(size_t i) const
    {
        return doneTransferTime[doneRead + i];
    }

    void ConsumeDone()
    {
        doneRead = doneTransfers.size();
    }

    void FlowTable(std::vector<double>& out) const
    {
        // per flow: src, dst, bytes, start, finish, fluid
        out.clear();
        out.reserve(flows.size() * 6);
        for (const Flow& f : flows)
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
        // per link direction: txBytes, peakQueueBytes, drops
        out.clear();
        for (const LinkStat* s : stats)
        {
            out.push_back(double(s->txBytes));
            out.push_back(double(s->peakQueue));
            out.push_back(double(s->drops));
        }
    }

    ~World()
    {
        for (LinkStat* s : stats)
        {
            delete s;
        }
    }
};

void
RdmaNic::Kick()
{
    if (m_tick.IsPending())
    {
        return;
    }
    double now = Simulator::Now().GetSeconds();
    double at = std::max(now, m_busyUntil);
    m_tick = Simulator::Schedule(CeilTime(at - now), &RdmaNic::Tick, this);
}

void
RdmaNic::Tick()
{
    double now = Simulator::Now().GetSeconds();
    const Params& P = m_world->P;
    uint32_t payload = P.mtu - 28; // IPv4 20 + UDP 8
    // drop finished or fully sent queue pairs
    double earliest = 1e300;
    Qp* pick = nullptr;
    size_t n = m_active.size();
    for (size_t k = 0; k < n; k++)
    {
        size_t i = (m_rr + k) % n;
        Qp* q = m_active[i];
        if (q->flow < 0)
        {
            continue;
        }
        if (q->nextAvail <= now + 1e-9)
        {
            pick = q;
            m_rr = i + 1;
            break;
        }
        earliest = std::min(earliest, q->nextAvail);
    }
    if (pick)
    {
        Flow& f = m_world->flows[pick->flow];
        uint32_t size = uint32_t(std::min<uint64_t>(payload, f.bytes - pick->sent));
        pick->sock->Send(Create<Packet>(size));
        pick->sent += size;
        m_world->OnSent(pick, size);
        double wire = double(size + 30) * 8.0; // + IPv4, UDP and PPP headers
        m_busyUntil = now + wire / m_lineBps;
        pick->nextAvail = now + wire / std::max(pick->rc, 1.0);
        if (pick->sent >= f.bytes)
        {
            // Fully sent: it leaves the scheduler but keeps reacting to CNPs until the
            // receiver reports completion.
            pick->nextAvail = 1e300;
            m_dirty = true;
            Simulator::ScheduleNow(&World::FlowSent, m_world, pick->flow);
        }
    }
    if (m_dirty)
    {
        // compact the list: queue pairs with nothing left to send leave the scheduler
        std::vector<Qp*> keep;
        keep.reserve(m_active.size());
        for (Qp* q : m_active)
        {
            if (q->flow >= 0 && q->sent < m_world->flows[q->flow].bytes)
            {
                keep.push_back(q);
            }
        }
        m_active.swap(keep);
        m_rr = 0;
        m_dirty = false;
    }
    earliest = 1e300;
    for (Qp* q : m_active)
    {
        earliest = std::min(earliest, q->nextAvail);
    }
    if (!m_active.empty())
    {
        double at = std::max(m_busyUntil, earliest);
        m_tick = Simulator::Schedule(CeilTime(std::max(1e-9, at - now)), &RdmaNic::Tick, this);
    }
}

} // namespace tsim
