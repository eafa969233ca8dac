// trainsim ns-3 core, the fabric builder (a helper, in ns-3's terms): Fabric creates the
// ns-3 nodes (hosts are NICs 0..numHosts-1, then the switches), installs the IPv4 stack
// with EcmpRouting (tsim_routing.h), adds point-to-point links with their per-direction
// counters (LinkStat, tsim_link.h), gives every switch its MMU and every switch egress
// port its queue disc (SwitchMmu, EcnQueueDisc: the switch models, tsim_switch.h), wires
// PFC pause frames between a port and the device upstream, installs the routing tables,
// counts IPv4 drops and reads every link's counters out in one table. It decides where
// things are and how they connect; what a switch does with a packet is the models'
// business. It knows nothing about flows or transports.
//
// Units: seconds for delays, bits/s for link rates, bytes for queue thresholds and
// counters, packets for buffer limits.
#pragma once

#include "tsim_common.h"
#include "tsim_device.h"
#include "tsim_link.h"
#include "tsim_routing.h"
#include "tsim_switch.h"

namespace tsim
{

// One end of a link as seen from the other end: who to pause, and how long it takes.
struct Peer
{
    uint32_t node{0};
    uint32_t iface{0};
    double delay{0}; // s, propagation
    double bps{0};
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
    std::vector<std::vector<Peer>> peers;          // [node][iface]: the other end of that link
    std::vector<std::vector<EcnQueueDisc*>> qdiscs; // [switch node][iface]: its egress queue
    std::vector<std::unique_ptr<SwitchMmu>> mmus;   // [node]: null for hosts
    std::vector<std::pair<uint32_t, uint32_t>> linkIfaces; // per link: a's and b's interface
    std::vector<std::pair<Ptr<LinkDevice>, Ptr<LinkDevice>>> linkDevs; // per link: a's, b's device
    std::function<void(uint32_t host, bool pause)> hostPause; // a host NIC paused/resumed
    std::vector<uint64_t> hostPausesReceived;      // per host
    std::vector<double> hostPausedSince, hostPausedTotal; // per host, s (-1: not paused)
    std::vector<uint64_t> hostCnpsSent;            // per host: CNPs its receiver sent
    std::vector<uint64_t> hostAcksSent, hostNacksSent; // per host: ACKs / NACKs its receiver sent
    const Params* P{nullptr};
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
        hostPausesReceived.assign(numHosts, 0);
        hostPausedSince.assign(numHosts, -1);
        hostPausedTotal.assign(numHosts, 0);
        hostCnpsSent.assign(numHosts, 0);
        hostAcksSent.assign(numHosts, 0);
        hostNacksSent.assign(numHosts, 0);
        peers.assign(nodes.GetN(), std::vector<Peer>(1));
        qdiscs.assign(nodes.GetN(), std::vector<EcnQueueDisc*>(1, nullptr));
        mmus.resize(nodes.GetN());
        for (uint32_t i = numHosts; i < nodes.GetN(); i++)
        {
            mmus[i] = std::make_unique<SwitchMmu>();
            SwitchMmu& m = *mmus[i];
            m.node = i;
            m.buffer = P->bufferBytes;
            m.alpha = P->dtAlpha;
            m.xonOffset = P->xonOffsetBytes;
            m.pfc = P->pfc;
            m.in.resize(1);
            m.sendPause = [this](uint32_t node, uint32_t iface, bool pause) { SendPause(node, iface, pause); };
            routing[i]->m_ingressSlot = &m.curIngress;
        }
    }

    // PFC: node's ingress port iface pauses (or resumes) the data class of the device at
    // the other end of that link. The PAUSE frame (64 B) is sent ahead of any data, and
    // lands after its serialisation and the link's propagation delay.
    void SendPause(uint32_t node, uint32_t iface, bool pause)
    {
        const Peer& up = peers[node][iface];
        Time at = CeilTime(up.delay + 64 * 8.0 / up.bps);
        Simulator::Schedule(at, &Fabric::ApplyPause, this, up.node, up.iface, pause);
    }

    void ApplyPause(uint32_t node, uint32_t iface, bool pause)
    {
        if (node < numHosts)
        {
            double now = Simulator::Now().GetSeconds();
            if (pause && hostPausedSince[node] < 0)
            {
                hostPausesReceived[node]++;
                hostPausedSince[node] = now;
            }
            else if (!pause && hostPausedSince[node] >= 0)
            {
                hostPausedTotal[node] += now - hostPausedSince[node];
                hostPausedSince[node] = -1;
            }
            if (hostPause)
            {
                hostPause(node, pause);
            }
            return;
        }
        EcnQueueDisc* q = qdiscs[node][iface];
        if (q)
        {
            q->SetPaused(pause);
        }
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


    // What PointToPointHelper::Install does, with trainsim's lean point-to-point device
    // (LinkDevice, tsim_device.h: the same events, less work per packet), except that only
    // switch ports get ns-3's flow control (a NetDeviceQueueInterface on the device). A
    // switch port's queue disc needs it: the device stops and wakes it as its one-packet
    // queue fills and drains. A host's device queue never fills (it holds a million
    // packets, and the RDMA NIC hands it one packet at a time), so there it would only cost
    // one extra event per packet sent (NetDeviceQueue::PacketDequeued's ScheduleNow, which
    // then finds nothing to wake); without it the traffic-control layer hands the host's
    // packets straight to the device, as it did when the queue was never stopped. Nothing
    // simulated changes.
    NetDeviceContainer InstallLink(uint32_t a, uint32_t b, double bps, double delay, uint32_t mtu)
    {
        NetDeviceContainer d;
        Ptr<LinkDevice> dev[2];
        for (int side = 0; side < 2; side++)
        {
            uint32_t n = side == 0 ? a : b;
            dev[side] = CreateObject<LinkDevice>();
            dev[side]->SetDataRate(DataRate(uint64_t(bps)));
            dev[side]->SetMtu(uint16_t(mtu));
            dev[side]->SetAddress(Mac48Address::Allocate());
            nodes.Get(n)->AddDevice(dev[side]);
            Ptr<Queue<Packet>> queue = CreateObject<DropTailQueue<Packet>>();
            dev[side]->SetQueue(queue);
            if (n >= numHosts)
            {
                Ptr<NetDeviceQueueInterface> ndqi = CreateObject<NetDeviceQueueInterface>();
                ndqi->GetTxQueue(0)->ConnectQueueTraces(queue);
                dev[side]->AggregateObject(ndqi);
            }
        }
        Ptr<LinkChannel> channel = CreateObject<LinkChannel>();
        for (int side = 0; side < 2; side++)
        {
            dev[side]->Attach(channel, Seconds(delay));
            d.Add(dev[side]);
        }
        channel->Connect();
        return d;
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
                     uint32_t mtu)
    {
        NetDeviceContainer d = InstallLink(a, b, bps, delay, mtu);
        uint32_t idx = linkEnds.size();
        linkEnds.push_back({a, b});
        uint32_t ifs[2];
        for (int side = 0; side < 2; side++)
        {
            uint32_t n = side == 0 ? a : b;
            Ptr<NetDevice> dev = d.Get(side);
            Ptr<LinkDevice> pdev = DynamicCast<LinkDevice>(dev);
            LinkStat* st = new LinkStat();
            st->bps = bps;
            linkStats.push_back(st);
            pdev->m_txStat = st; // the device counts its bytes and takes its frame times from it
            Ptr<Ipv4> ip = nodes.Get(n)->GetObject<Ipv4>();
            uint32_t iface = ip->AddInterface(dev);
            if (iface != dev->GetIfIndex())
            {
                // EcmpRouting reads a packet's interface as its device's index
                throw std::runtime_error("tsim: IPv4 interface and device indices differ");
            }
            pdev->SetIpv4(nodes.Get(n)->GetObject<Ipv4L3Protocol>());
            ifs[side] = iface;
            if (n < numHosts)
            {
                ip->AddAddress(iface,
                               Ipv4InterfaceAddress(Ipv4Address(kBaseAddr + n), Ipv4Mask("/32")));
                routing[n]->m_singleIf = iface;
                hostLineBps[n] = std::max(hostLineBps[n], bps);
                // Hosts: the TCP sender may burst a window into its own device; keep it.
                pdev->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, 1000000));
                pdev->m_queuePeak = &st->peakQueue; // noted by the device as it enqueues
                pdev->GetQueue()->TraceConnectWithoutContext(
                    "Drop",
                    MakeCallback(&LinkStat::OnDevDrop, st));
            }
            else
            {
                pdev->GetQueue()->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, kSwitchDevicePackets));
                Ptr<EcnQueueDisc> q = CreateObject<EcnQueueDisc>();
                q->m_kmin = kminBytes;
                q->m_kmax = std::max(kmaxBytes, kminBytes + 1.0);
                q->m_pmax = pmax;
                q->m_ecn = P->ecn;
                q->m_ecnAtDequeue = P->ecnAtDequeue;
                q->m_bps = bps;
                q->m_mmu = mmus[n].get();
                q->m_int = P->cc == kCcHpcc;
                q->m_peak = &st->peakQueue;
                // a fixed random stream per port, so runs repeat exactly even when several
                // simulations share one process
                q->SetStream(int64_t(2 * idx + side));
                nodes.Get(n)->GetObject<TrafficControlLayer>()->SetRootQueueDiscOnDevice(dev, q);
                q->TraceConnectWithoutContext("Drop", MakeCallback(&LinkStat::OnDrop, st));
            }
            ip->SetMetric(iface, 1);
            ip->SetUp(iface);
        }
        linkIfaces.push_back({ifs[0], ifs[1]});
        linkDevs.push_back({DynamicCast<LinkDevice>(d.Get(0)), DynamicCast<LinkDevice>(d.Get(1))});
        for (int side = 0; side < 2; side++)
        {
            uint32_t n = side == 0 ? a : b, other = side == 0 ? b : a;
            if (peers[n].size() <= ifs[side])
            {
                peers[n].resize(ifs[side] + 1);
                qdiscs[n].resize(ifs[side] + 1, nullptr);
            }
            peers[n][ifs[side]] = Peer{other, ifs[1 - side], delay, bps};
            if (n >= numHosts)
            {
                Ptr<TrafficControlLayer> tc = nodes.Get(n)->GetObject<TrafficControlLayer>();
                qdiscs[n][ifs[side]] = PeekPointer(DynamicCast<EcnQueueDisc>(tc->GetRootQueueDiscOnDevice(d.Get(side))));
                // Headroom of this ingress port: what can still arrive after it decides to
                // pause: the pause's flight and serialisation, the data in flight the other
                // way, the packet upstream is sending, the packets its device has taken,
                // the packet being received here.
                SwitchMmu& m = *mmus[n];
                if (m.in.size() <= ifs[side])
                {
                    m.in.resize(ifs[side] + 1);
                }
                double pkt = double(mtu + 2);
                m.in[ifs[side]].headroomCap = 2 * delay * bps / 8 + 64 + (kSwitchDevicePackets + 3) * pkt +
                                              P->headroomExtraBytes;
            }
        }
        return idx;
    }

    // Link errors: each end of link discards an arriving packet (data, ACK, NACK or CNP)
    // with probability `rate` (SimAI topology files' error_rate; PFC frames are modelled
    // out of band and never lost). Counted per direction (LinkStat::lost).
    void SetLinkErrorRate(uint32_t link, double rate)
    {
        for (int side = 0; side < 2; side++)
        {
            Ptr<LinkDevice> rx = side == 0 ? linkDevs[link].second : linkDevs[link].first;
            Ptr<RateErrorModel> em = CreateObject<RateErrorModel>();
            em->SetUnit(RateErrorModel::ERROR_UNIT_PACKET);
            em->SetRate(rate);
            em->AssignStreams(int64_t(1000000 + 2 * link + side)); // runs repeat exactly
            rx->SetReceiveErrorModel(em);
            rx->m_rxStat = linkStats[2 * link + side];
        }
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

    // Per link direction a->b (link order, a->b then b->a), kLinkColumns numbers:
    // txBytes, peakQueueBytes (a's egress), drops (a's egress), pausesSent (PAUSE frames a
    // sent to b: a's ingress from b was full), pausesReceived (times b paused a's
    // transmission to b), pausedSeconds (how long it was paused), ecnMarks (CE marks at
    // a's egress), cnps (CNPs sent a->b), peakIngressBytes (b's buffer held for packets
    // that came from a; 0 when b is a host), peakSwitchBuffer (a's whole shared buffer at
    // its fullest; 0 for a host), acks and nacks (sent a->b; reliable mode), lost (packets
    // b discarded as corrupted: the link's error rate).
    static const int kLinkColumns = 13;

    void LinkTable(std::vector<double>& out) const
    {
        out.clear();
        double now = Simulator::Now().GetSeconds();
        for (size_t l = 0; l < linkEnds.size(); l++)
        {
            for (int side = 0; side < 2; side++)
            {
                uint32_t a = side == 0 ? linkEnds[l].first : linkEnds[l].second;
                uint32_t b = side == 0 ? linkEnds[l].second : linkEnds[l].first;
                uint32_t ifa = side == 0 ? linkIfaces[l].first : linkIfaces[l].second;
                uint32_t ifb = side == 0 ? linkIfaces[l].second : linkIfaces[l].first;
                const LinkStat* st = linkStats[2 * l + side];
                double pausesSent = 0, pausesRecv = 0, paused = 0, marks = 0, cnps = 0, peakIn = 0, acks = 0,
                       nacks = 0;
                if (a < numHosts)
                {
                    pausesRecv = double(hostPausesReceived[a]);
                    paused = hostPausedTotal[a] + (hostPausedSince[a] >= 0 ? now - hostPausedSince[a] : 0.0);
                    cnps = double(hostCnpsSent[a]);
                    acks = double(hostAcksSent[a]);
                    nacks = double(hostNacksSent[a]);
                }
                else
                {
                    const EcnQueueDisc* q = qdiscs[a][ifa];
                    pausesSent = double(mmus[a]->in[ifa].pausesSent);
                    pausesRecv = double(q->m_pausesReceived);
                    paused = q->PausedSeconds();
                    marks = double(q->m_ecnMarks);
                    cnps = double(q->m_cnps);
                    acks = double(q->m_acks);
                    nacks = double(q->m_nacks);
                }
                if (b >= numHosts)
                {
                    peakIn = mmus[b]->in[ifb].peak;
                }
                double peakBuf = a >= numHosts ? mmus[a]->peakUsed : 0.0; // a's whole shared buffer, peak
                out.insert(out.end(), {double(st->txBytes), double(st->peakQueue), double(st->drops), pausesSent,
                                       pausesRecv, paused, marks, cnps, peakIn, peakBuf, acks, nacks,
                                       double(st->lost)});
            }
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
