// trainsim ns-3 core, part 3 of 7: the fabric. Fabric creates the ns-3 nodes (hosts are
// NICs 0..numHosts-1, then the switches), installs the IPv4 stack with EcmpRouting,
// adds point-to-point links with their per-direction counters (LinkStat) and, on switch
// egress ports, the ECN-marking queue (EcnQueueDisc), installs routing tables and counts
// IPv4 drops. It knows nothing about flows or transports.
//
// Units: seconds for delays, bits/s for link rates, bytes for queue thresholds and
// counters, packets for buffer limits.
#pragma once

#include "tsim_common.h"
#include "tsim_routing.h"

namespace tsim
{

// Totals of one direction of one link: bytes on the wire, deepest egress queue, drops.
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

// The nodes, links and routing tables of one simulation.
class Fabric
{
  public:
    Fabric() = default;
    Fabric(const Fabric&) = delete;
    Fabric& operator=(const Fabric&) = delete;

    NodeContainer nodes;                 // hosts 0..numHosts-1, then switches
    uint32_t numHosts{0};
    uint32_t firstNodeId{0};             // ns-3 id of node 0 (ids restart only after Simulator::Destroy)
    std::vector<double> hostLineBps;     // host -> NIC rate, bits/s (its fastest link)
    std::vector<LinkStat*> linkStats;    // 2 per link (a->b, b->a), in link order
    std::vector<std::pair<uint32_t, uint32_t>> linkEnds; // per link: its two nodes
    std::vector<Ptr<EcmpRouting>> routing; // per node
    uint64_t ipDrops{0};                 // packets IPv4 dropped anywhere (no route, TTL)
    std::map<int, uint64_t> ipDropReasons; // Ipv4L3Protocol::DropReason -> packets

    void CreateNodes(uint32_t nHosts, uint32_t nSwitches)
    {
        numHosts = nHosts;
        nodes.Create(nHosts + nSwitches);
        firstNodeId = nodes.Get(0)->GetId(); // ids restart only after Simulator::Destroy
    }

    // The IPv4 stack with EcmpRouting on every node (ns-3's TCP defaults must be set before).
    void InstallStack()
    {
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
            routing[i]->m_host = i < numHosts ? int32_t(i) : -1;
        }
        hostLineBps.assign(numHosts, 0);
    }

    Ptr<Node> Host(uint32_t host) const
    {
        return nodes.Get(host);
    }

    // Host index of a host's node.
    uint32_t HostOf(Ptr<Node> node) const
    {
        return node->GetId() - firstNodeId;
    }


    // Adds a full-duplex link of bps bits/s and delay s between nodes a and b; returns its
    // index. Devices carry IP packets of up to mtu bytes. Switch egress ports get an
    // ECN-marking queue (Kmin/Kmax in bytes, pmax) deep enough that nothing is dropped.
    uint32_t AddLink(uint32_t a,
                     uint32_t b,
                     double bps,
                     double delay,
                     double kminBytes,
                     double kmaxBytes,
                     double pmax,
                     uint32_t bufferPkts,
                     uint32_t mtu)
    {
        PointToPointHelper p2p;
        p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(bps))));
        p2p.SetDeviceAttribute("Mtu", UintegerValue(mtu));
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
            linkStats.push_back(st);
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

    // Installs node's next-hop interfaces towards dstHost (interface indices: a node's links
    // in the order they were added, from 1; 0 is loopback).
    void SetNextHops(uint32_t node, uint32_t dstHost, const std::vector<uint32_t>& ifaces)
    {
        auto& t = routing[node]->m_next;
        if (t.size() < numHosts)
        {
            t.resize(numHosts);
        }
        t[dstHost] = ifaces;
    }

    // All of node's routing table at once: ptr has numHosts + 1 entries, and the interfaces
    // towards host h are ifs[ptr[h]:ptr[h+1]].
    void SetNextHopsBulk(uint32_t node, const int32_t* ptr, const uint32_t* ifs)
    {
        auto& t = routing[node]->m_next;
        t.assign(numHosts, {});
        for (uint32_t h = 0; h < numHosts; h++)
        {
            t[h].assign(ifs + ptr[h], ifs + ptr[h + 1]);
        }
    }

    void OnIpDrop(const Ipv4Header&, Ptr<const Packet>, Ipv4L3Protocol::DropReason r, Ptr<Ipv4>, uint32_t)
    {
        ipDrops++;
        ipDropReasons[int(r)]++;
    }

    uint64_t IpDropsFor(int reason)
    {
        return ipDropReasons[reason];
    }

    // Counts every packet IPv4 drops on any node from now on.
    void WatchIpDrops()
    {
        for (uint32_t i = 0; i < nodes.GetN(); i++)
        {
            nodes.Get(i)->GetObject<Ipv4L3Protocol>()->TraceConnectWithoutContext(
                "Drop",
                MakeCallback(&Fabric::OnIpDrop, this));
        }
    }

    // Per link direction: txBytes, peakQueueBytes, drops.
    void LinkTable(std::vector<double>& out) const
    {
        out.clear();
        for (const LinkStat* s : linkStats)
        {
            out.push_back(double(s->txBytes));
            out.push_back(double(s->peakQueue));
            out.push_back(double(s->drops));
        }
    }

    ~Fabric()
    {
        for (LinkStat* s : linkStats)
        {
            delete s;
        }
    }
};

} // namespace tsim
