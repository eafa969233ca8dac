// trainsim ns-3 core, the RDMA transport (--transport rdma). Every host has a RoCE-like
// NIC (RdmaNic) whose queue pairs (Qp, one per flow) are served round-robin at no more
// than the line rate, each no faster than its congestion control's rate (and no more than
// its window in flight, where it has one): a NIC never queues more than a packet in its
// own device, so all queueing (and ECN marking) happens in the switches, as with RoCE.
// Data are UDP datagrams to port kRdmaPort; CNPs, ACKs and NACKs go back in the
// high-priority class. RdmaTransport owns the NICs and queue pairs and reports flows sent
// and delivered through FlowEvents.
//
// The policies are pieces behind the interfaces of tsim_cc.h, one of each per queue pair:
// the congestion control (Params::cc: Dcqcn, tsim_dcqcn.h, or Hpcc, tsim_hpcc.h) and, in
// the reliable mode (Params::reliable: HPCC, or a fabric with link error rates), the loss
// recovery (GoBackN, tsim_gbn.h). This file is the mechanism they drive: sockets, packets
// and their tags, the NIC's pacing and round-robin, and the fixed points at which each
// piece is called. Without the reliable mode the fabric is lossless, nothing is ACKed and
// the receiver just counts bytes.
//
// Units: seconds (double) for times, bits/s for rates (QpState::line, rc; NIC line rate),
// bytes for sizes, windows and counters.
#pragma once

#include "tsim_cc.h"
#include "tsim_common.h"
#include "tsim_dcqcn.h"
#include "tsim_fabric.h"
#include "tsim_gbn.h"
#include "tsim_hpcc.h"

namespace tsim
{

// One RDMA flow's queue pair: the sending state its pieces share (QpState), its socket, its
// place in the NIC's schedule, and the pieces themselves. The receiver's per-flow state
// (CNP and NACK clocks) lives in the same pieces: the simulation knows both ends.
struct Qp : QpState
{
    int32_t flow{-1}; // -1 once delivered: the NIC drops it from its list lazily
    Ptr<Socket> sock; // only where UDP itself must deliver to it (StartFlow)
    uint32_t src{0};
    uint32_t dst{0};
    uint16_t port{0};      // its socket's local (source) port
    uint64_t maxSent{0};   // the furthest sndNxt has been
    bool inActive{false};  // in its NIC's round-robin list
    size_t pos{0};         // its index in the NIC's list while inActive
    double nextAvail{0};   // s: earliest time its next packet may leave (pacing at rc)
    std::unique_ptr<CongestionControl> cc;
    std::unique_ptr<LossRecovery> loss; // reliable mode only
};

class RdmaTransport;

// One host's NIC: a round-robin scheduler over its queue pairs with data to send.
//
// Which queue pair sends next: the first one, in list order from the round-robin position,
// with bytes to send, room in its window and its pacing time come; when none is ready, the
// NIC wakes at the earliest pacing time. Both used to be a pass over the whole list per
// packet, O(queue pairs) per packet: an all-to-all gives every NIC one queue pair per peer
// (and per chunk), so at 128 GPUs ~10 us of CPU per event and ~N^3 in all. Where no queue
// pair has a window (DCQCN without the reliable mode, the default), a queue pair's pacing
// time changes only when it sends, so the NIC keeps them in a lazy min-heap (m_byTime: an
// entry is current while its time equals the queue pair's and the queue pair is listed
// with bytes to send): the earliest time is its top, and when the first SCAN_FIRST places of
// the round robin hold no ready queue pair, the ready ones are taken from the heap and the
// nearest in round-robin order is picked. The same queue pair, the same wake-up time: the
// same packets at the same instants as the plain passes (kept for HPCC and the reliable
// mode, whose windows and rewinds the heap does not follow).
class RdmaNic : public DrainWaiter
{
  public:
    RdmaTransport* m_transport{nullptr};
    uint32_t m_host{0};
    LinkDevice* m_dev{nullptr}; // the host's link device (StartHost)
    double m_lineBps{0};
    std::vector<Qp*> m_active; // queue pairs with bytes left to send
    size_t m_rr{0};            // round-robin position in m_active
    EventId m_tick;
    double m_tickAt{0};        // s: when m_tick fires
    double m_busyUntil{0};     // s: the device is sending until then
    bool m_dirty{false};       // m_active holds queue pairs to drop
    bool m_paused{false};      // PFC: the switch port above has paused the data class
    bool m_timed{false};       // no windows: pacing times kept in m_byTime (RdmaTransport::Init)
    std::vector<std::pair<double, Qp*>> m_byTime; // lazy min-heap of (nextAvail, queue pair)
    std::vector<std::pair<double, Qp*>> m_ready;  // PickFromHeap's scratch, kept between packets
    // Round-robin places tried before the heap. Any value picks the same queue pair (the heap
    // finds the nearest ready one past them); 32 keeps the usual case, a ready queue pair
    // near the round-robin position, one short pass, and bounds the pass when none is.
    static constexpr size_t SCAN_FIRST = 32;

    void Kick();
    void Tick();
    void Listed(Qp* q); // q joined m_active (or its pacing time moved): its heap entry

    // The device sent what waited in its queue (Tick found packets there: the host's own
    // control packets had taken wire time the pacing clock did not count).
    void OnDeviceDrained() override
    {
        Kick();
    }

  private:
    static bool Later(const std::pair<double, Qp*>& a, const std::pair<double, Qp*>& b)
    {
        return a.first > b.first;
    }
    static bool Current(const std::pair<double, Qp*>& e)
    {
        const Qp* q = e.second;
        return q->inActive && q->flow >= 0 && q->sndNxt < q->bytes && e.first == q->nextAvail;
    }
    void DropStale(); // pop entries that are no longer current off the heap's top
    Qp* PickFromHeap(double now);
};

class RdmaTransport
{
  public:
    RdmaTransport(const Params& params, Fabric& fabric, FlowRegistry& flows, FlowEvents& events)
        : P(params),
          m_fabric(fabric),
          m_flows(flows),
          m_events(events)
    {
    }

    const Params& P;
    Fabric& m_fabric;
    FlowRegistry& m_flows;
    FlowEvents& m_events;
    CcTraits ccTraits;                   // the run's congestion control, as the rest sees it (Init)
    std::vector<RdmaNic> nics;           // per host
    std::vector<Ptr<Socket>> receivers;  // per host: the UDP socket on kRdmaPort
    std::vector<Ptr<UdpL4Protocol>> udp; // per host: its UDP, which data packets are handed to (SendData)
    std::unordered_map<int32_t, Qp*> qpOfFlow; // flows in flight -> their queue pair
    std::deque<Qp> qpStore; // stable addresses; one per RDMA flow of the run
    std::unordered_map<uint64_t, double> rttCache; // (src, dst) -> base RTT, s
    RdmaTotals totals;      // read by tests and reports

    // After Params are set: the congestion control's traits, and one NIC per host.
    void Init(uint32_t nHosts)
    {
        ccTraits = P.cc == kCcHpcc ? Hpcc::Traits(P) : Dcqcn::Traits(P);
        nics.resize(nHosts);
        for (uint32_t h = 0; h < nHosts; h++)
        {
            nics[h].m_transport = this;
            nics[h].m_host = h;
            nics[h].m_timed = P.cc != kCcHpcc && !P.reliable; // only HPCC sets windows; only
                                                              // the reliable mode rewinds sndNxt
        }
    }

    // Payload bytes of one data packet: MTU - IPv4 20 - UDP 8, minus the bytes the
    // congestion control reserves (HPCC: the INT header switches fill in).
    uint32_t Payload() const
    {
        return P.mtu - 28 - ccTraits.intBytes;
    }

    // Opens host h's receiver and sets its NIC's line rate (its links exist by now).
    void StartHost(uint32_t h)
    {
        Ptr<Socket> s = Socket::CreateSocket(m_fabric.Host(h), UdpSocketFactory::GetTypeId());
        s->SetIpRecvTos(true);
        s->SetIpTos(kCnpTos); // this socket sends only CNPs, ACKs and NACKs: the high-priority class
        s->Bind(InetSocketAddress(Ipv4Address::GetAny(), kRdmaPort));
        s->SetRecvCallback(MakeCallback(&RdmaTransport::Receive, this));
        receivers.push_back(s);
        udp.push_back(m_fabric.Host(h)->GetObject<UdpL4Protocol>());
        nics[h].m_lineBps = m_fabric.hostLineBps[h];
        Ptr<NetDevice> dev = m_fabric.Host(h)->GetDevice(m_fabric.routing[h]->m_singleIf);
        nics[h].m_dev = dynamic_cast<LinkDevice*>(PeekPointer(dev));
        InstallRx(h);
    }

    void InstallRx(uint32_t h); // UdpRx in front of host h's UDP (defined after UdpRx)

    // PFC from the host's switch port: stop or resume sending data.
    void SetPaused(uint32_t host, bool paused)
    {
        nics[host].m_paused = paused;
        if (!paused)
        {
            nics[host].Kick();
        }
    }

    // Base round-trip time src -> dst -> src along the first ECMP choice at every hop:
    // propagation both ways, one MTU packet's serialisation out and one 64-byte ACK's back
    // per link (HPCC's T).
    double PathRtt(uint32_t src, uint32_t dst)
    {
        uint64_t key = (uint64_t(src) << 32) | dst;
        auto it = rttCache.find(key);
        if (it != rttCache.end())
        {
            return it->second;
        }
        double t = 0;
        uint32_t node = src;
        for (int guard = 0; node != dst && guard < 64; guard++)
        {
            const auto& r = m_fabric.routing[node];
            uint32_t iface = (dst < r->m_next.size() && !r->m_next[dst].empty()) ? r->m_next[dst][0] : r->m_singleIf;
            const Peer& pr = m_fabric.peers[node][iface];
            t += 2 * pr.delay + double(P.mtu + 2 + 64) * 8.0 / pr.bps;
            node = pr.node;
        }
        rttCache[key] = t;
        return t;
    }

    // A queue pair for flow id, sending from source port `port`, at line rate to begin
    // with, with its congestion control and (reliable mode) loss recovery.
    void StartFlow(int32_t id, uint16_t port)
    {
        Flow& f = m_flows[id];
        Ptr<Node> n = m_fabric.Host(f.src);
        qpStore.emplace_back();
        Qp* q = &qpStore.back();
        q->flow = id;
        q->src = f.src;
        q->dst = f.dst;
        q->port = port;
        q->bytes = f.bytes;
        q->line = nics[f.src].m_lineBps;
        q->rc = q->line;
        q->nextAvail = f.start;
        if (P.cc == kCcHpcc)
        {
            q->cc = std::make_unique<Hpcc>(P, *q, PathRtt(f.src, f.dst));
        }
        else
        {
            q->cc = std::make_unique<Dcqcn>(P, *q, totals);
        }
        // A socket of its own only where UDP, not UdpRx, would deliver its control packets
        // (checksums on) or it sends through one (a loopback flow, which World finishes
        // before it gets here): elsewhere UdpRx finds the queue pair by its port, and the
        // socket's bind and close were each a pass over the host's sockets (UDP's port
        // check, Ipv4EndPointDemux and UdpL4Protocol::RemoveSocket), O(queue pairs^2) per host.
        if (Node::ChecksumEnabled() || f.src == f.dst)
        {
            q->sock = Socket::CreateSocket(n, UdpSocketFactory::GetTypeId());
            q->sock->SetIpTos(kDataTos);
            q->sock->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
            q->sock->Connect(InetSocketAddress(Ipv4Address(kBaseAddr + f.dst), kRdmaPort));
            q->sock->SetRecvCallback(MakeCallback(&RdmaTransport::ReceiveCtrl, this));
        }
        qpOfFlow[id] = q;
        if (P.reliable)
        {
            q->loss = std::make_unique<GoBackN>(P, *q, totals, [this, q]() { Activate(q); });
            q->loss->Start(f.start);
        }
        Activate(q);
    }

    // A data packet out of queue pair q's socket: what UdpSocketImpl::Send does for a
    // connected socket bound to any address on a node with a routing protocol (ns-3.44,
    // UdpSocketImpl::DoSendTo), without the per-packet work that changes nothing here: the
    // socket's state checks (it is bound, connected and open until its flow is delivered,
    // and a payload of at most an MTU fits any datagram), the broadcast check (a queue
    // pair never sends to its own host: such a flow takes the socket's path) and the copy
    // of a packet nobody else holds. The same tags (TOS; priority, none for kDataTos;
    // don't-fragment off, UdpSocket's MtuDiscover default), the same route from the same
    // routing call, the same UDP send: the same bytes and tags leave the host.
    void SendData(Qp* q, Ptr<Packet> p)
    {
        if (q->dst == q->src)
        {
            q->sock->Send(p);
            return;
        }
        SocketIpTosTag tos;
        tos.SetTos(kDataTos); // the socket's IpTos (StartFlow)
        p->ReplacePacketTag(tos);
        uint8_t priority = Socket::IpTos2Priority(kDataTos);
        if (priority)
        {
            SocketPriorityTag tag;
            tag.SetPriority(priority);
            p->ReplacePacketTag(tag);
        }
        SocketSetDontFragmentTag df;
        if (!p->RemovePacketTag(df))
        {
            df.Disable();
            p->AddPacketTag(df);
        }
        Ipv4Header header;
        Ipv4Address dst(kBaseAddr + q->dst);
        header.SetDestination(dst);
        header.SetProtocol(UdpL4Protocol::PROT_NUMBER);
        Socket::SocketErrno err;
        Ptr<Ipv4Route> route = m_fabric.routing[q->src]->RouteOutput(p, header, nullptr, err);
        udp[q->src]->Send(p, route->GetSource(), dst, q->port, kRdmaPort, route);
    }

    void Activate(Qp* q)
    {
        if (!q->inActive)
        {
            q->inActive = true;
            q->pos = nics[q->src].m_active.size();
            nics[q->src].m_active.push_back(q);
            nics[q->src].Listed(q);
        }
        nics[q->src].Kick();
    }

    // ---------------- receiver ----------------
    void SendCtrl(Ptr<Socket> s, const Address& to, uint32_t host, uint8_t kind, uint64_t seq, const RdmaTag* data)
    {
        Ptr<Packet> p = Create<Packet>(34); // 64 bytes on the wire with IPv4, UDP and PPP
        RdmaTag t;
        t.kind = kind;
        t.seq = seq;
        if (data && ccTraits.intOn)
        {
            t.nhop = data->nhop;
            for (uint32_t i = 0; i < data->nhop; i++)
            {
                t.hop[i] = data->hop[i];
            }
        }
        p->AddPacketTag(t);
        s->SendTo(p, 0, to);
        (kind == RdmaTag::kNack ? m_fabric.hostNacksSent : m_fabric.hostAcksSent)[host]++;
    }

    // Receiver: data packets. Counts the flow's bytes (in order, in the reliable mode, where
    // the loss recovery decides between ACK, NACK and drop), answers CE marks with a CNP
    // when the congestion control asks for it, and reports the flow delivered with its
    // last byte.
    void Receive(Ptr<Socket> s)
    {
        Address from;
        Ptr<Packet> p;
        while ((p = s->RecvFrom(from)))
        {
            ReceiveData(s, p, from);
        }
    }

    // One data packet from `from` on host socket s (Receive, or UdpRx straight from IP).
    void ReceiveData(Ptr<Socket> s, Ptr<Packet> p, const Address& from)
    {
        InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
        uint32_t srcHost = a.GetIpv4().Get() - kBaseAddr;
        int32_t id = m_flows.FindBySource(srcHost, a.GetPort());
        if (id < 0)
        {
            return;
        }
        Flow& f = m_flows[id];
        // The queue pair is looked up only for the packets that need it (CE-marked,
        // reliable mode, or the flow's last): not once per data packet.
        Qp* q = nullptr;
        bool looked = false;
        auto qi = qpOfFlow.end(); // kept for the erase at the flow's end
        auto qp = [&]() -> Qp* {
            if (!looked)
            {
                qi = qpOfFlow.find(id);
                q = qi == qpOfFlow.end() ? nullptr : qi->second;
                looked = true;
            }
            return q;
        };
        double now = Simulator::Now().GetSeconds();
        SocketIpTosTag tos;
        if (ccTraits.cnpOnCe && p->PeekPacketTag(tos) && (tos.GetTos() & 0x3) == 0x3 && qp() &&
            q->cc->OnCeMarked(now))
        {
            s->SendTo(Create<Packet>(16), 0, from);
            m_fabric.hostCnpsSent[f.dst]++;
        }
        if (P.reliable)
        {
            RdmaTag t;
            if (!qp() || !p->PeekPacketTag(t))
            {
                return;
            }
            RxVerdict v = q->loss->OnData(t.seq, f.rcvd, now);
            if (v == RxVerdict::kAccept)
            {
                f.rcvd += p->GetSize();
                SendCtrl(s, from, f.dst, RdmaTag::kAck, f.rcvd, &t);
            }
            else
            {
                if (v == RxVerdict::kDuplicate)
                {
                    SendCtrl(s, from, f.dst, RdmaTag::kAck, f.rcvd, &t);
                }
                else if (v == RxVerdict::kNack)
                {
                    SendCtrl(s, from, f.dst, RdmaTag::kNack, f.rcvd, nullptr);
                }
                return;
            }
        }
        else
        {
            f.rcvd += p->GetSize();
        }
        if (f.rcvd >= f.bytes)
        {
            if (qp())
            {
                q->cc->Stop();
                if (q->loss)
                {
                    q->loss->Stop();
                }
                if (q->sock)
                {
                    q->sock->Close();
                    q->sock = nullptr;
                }
                q->flow = -1; // the NIC drops it from its list lazily
                nics[f.src].m_dirty = true;
                qpOfFlow.erase(qi);
                // Nothing calls the pieces after Stop (their timers are cancelled and the
                // queue pair is out of qpOfFlow): free them, keep the queue pair.
                q->cc.reset();
                q->loss.reset();
            }
            m_events.FlowDone(id);
        }
    }

    // ---------------- sender ----------------
    // CNPs (no tag), ACKs and NACKs arriving on a queue pair's socket.
    void ReceiveCtrl(Ptr<Socket> s)
    {
        Ptr<Packet> p;
        while ((p = s->Recv()))
        {
            Address local;
            s->GetSockName(local);
            uint16_t port = InetSocketAddress::ConvertFrom(local).GetPort();
            if (Qp* q = QpAt(m_fabric.HostOf(s->GetNode()), port))
            {
                ReceiveCtrlFor(q, p);
            }
        }
    }

    // The queue pair of host's local port `port` until its flow is delivered (it is in
    // qpOfFlow from StartFlow to then), or null.
    Qp* QpAt(uint32_t host, uint16_t port)
    {
        int32_t id = m_flows.FindBySource(host, port);
        if (id < 0)
        {
            return nullptr;
        }
        auto qi = qpOfFlow.find(id);
        return qi == qpOfFlow.end() ? nullptr : qi->second;
    }

    // One CNP, ACK or NACK for queue pair q (QpAt).
    void ReceiveCtrlFor(Qp* q, Ptr<Packet> p)
    {
        RdmaTag t;
        double now = Simulator::Now().GetSeconds();
        if (!p->PeekPacketTag(t))
        {
            q->cc->OnCnp();
        }
        else if (t.kind == RdmaTag::kNack)
        {
            q->loss->OnNack(t.seq, now);
        }
        else
        {
            OnAck(q, t, now);
        }
    }

    // An ACK: the loss recovery takes its cumulative part, then the congestion control
    // its telemetry; the NIC looks again if the window was full or the rate may have moved.
    void OnAck(Qp* q, const RdmaTag& t, double now)
    {
        bool blocked = q->win > 0 && double(q->sndNxt - q->sndUna) >= q->win;
        q->loss->OnAck(t.seq, now);
        q->cc->OnAck(t);
        if (blocked || ccTraits.kickOnAck)
        {
            nics[q->src].Kick();
        }
    }
};

// Host h's receive side of UDP, put in front of ns-3's UdpL4Protocol (Ipv4L3Protocol hands
// every UDP datagram to the protocol registered for number 17). Why: UdpL4Protocol finds a
// datagram's socket with Ipv4EndPointDemux::Lookup, a pass over every socket of the host,
// and an all-to-all gives each host a socket per queue pair: perf put 44% of a 128-GPU
// all-to-all's CPU in that pass and the socket list's upkeep (Lookup, IsRxEnabled,
// GetLocalPort; RemoveSocket 9% more). A datagram for the host's RDMA port, or for an
// undelivered queue pair's port, is handed on here as UdpL4Protocol and the socket would hand it
// (ns-3.44, UdpL4Protocol::Receive and UdpSocketImpl::ForwardUp): the UDP header removed;
// for the receiver socket (SetIpRecvTos) the IP header's TOS as a SocketIpTosTag; any
// SocketPriorityTag removed; then the same per-packet handler the socket's callback calls,
// at the same instant (the socket path is synchronous too). A control packet for a queue pair
// already delivered is dropped, as a RoCE NIC drops one it has no context for (ns-3's UDP
// would answer it with an ICMP port unreachable in the data class). With checksums on, every
// datagram goes to UdpL4Protocol itself, unchanged.
class UdpRx : public IpL4Protocol
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("tsim::UdpRx").SetParent<IpL4Protocol>().SetGroupName("Tsim");
        return tid;
    }

    RdmaTransport* m_transport{nullptr};
    uint32_t m_host{0};
    Ptr<UdpL4Protocol> m_udp;

    int GetProtocolNumber() const override
    {
        return UdpL4Protocol::PROT_NUMBER;
    }

    RxStatus Receive(Ptr<Packet> p, const Ipv4Header& header, Ptr<Ipv4Interface> iface) override
    {
        if (Node::ChecksumEnabled())
        {
            return m_udp->Receive(p, header, iface);
        }
        UdpHeader uh;
        p->PeekHeader(uh);
        RdmaTransport& T = *m_transport;
        uint16_t dport = uh.GetDestinationPort();
        if (dport == kRdmaPort)
        {
            p->RemoveHeader(uh);
            SocketIpTosTag tos;
            tos.SetTos(header.GetTos());
            p->AddPacketTag(tos);
            SocketPriorityTag priority;
            p->RemovePacketTag(priority);
            T.ReceiveData(T.receivers[m_host], p, InetSocketAddress(header.GetSource(), uh.GetSourcePort()));
            return IpL4Protocol::RX_OK;
        }
        Qp* q = T.QpAt(m_host, dport);
        if (!q)
        {
            // A CNP, ACK or NACK for a queue pair whose flow was delivered (every other UDP
            // datagram goes to kRdmaPort or an undelivered queue pair): a RoCE NIC has no context for
            // it and drops it. ns-3's UDP would answer it with an ICMP port unreachable, a
            // datagram in the data class that the congested fabric then carries back.
            T.totals.ctrlForClosedQp++;
            return IpL4Protocol::RX_OK;
        }
        p->RemoveHeader(uh);
        SocketPriorityTag priority;
        p->RemovePacketTag(priority);
        T.ReceiveCtrlFor(q, p);
        return IpL4Protocol::RX_OK;
    }

    RxStatus Receive(Ptr<Packet> p, const Ipv6Header& header, Ptr<Ipv6Interface> iface) override
    {
        return m_udp->Receive(p, header, iface);
    }

    void SetDownTarget(IpL4Protocol::DownTargetCallback cb) override
    {
        m_udp->SetDownTarget(cb);
    }

    void SetDownTarget6(IpL4Protocol::DownTargetCallback6 cb) override
    {
        m_udp->SetDownTarget6(cb);
    }

    IpL4Protocol::DownTargetCallback GetDownTarget() const override
    {
        return m_udp->GetDownTarget();
    }

    IpL4Protocol::DownTargetCallback6 GetDownTarget6() const override
    {
        return m_udp->GetDownTarget6();
    }
};

inline void
RdmaTransport::InstallRx(uint32_t h)
{
    Ptr<UdpRx> rx = CreateObject<UdpRx>();
    rx->m_transport = this;
    rx->m_host = h;
    rx->m_udp = udp[h];
    m_fabric.Host(h)->GetObject<Ipv4L3Protocol>()->Insert(rx);
}

inline void
RdmaNic::Kick()
{
    if (m_paused)
    {
        return;
    }
    double now = Simulator::Now().GetSeconds();
    double at = std::max(now, m_busyUntil);
    if (m_tick.IsPending())
    {
        if (m_tickAt <= at + 1e-9)
        {
            return;
        }
        m_tick.Cancel(); // a later tick (waiting for pacing) must not delay a queue pair ready now
    }
    m_tickAt = at;
    m_tick = Simulator::Schedule(CeilTime(at - now), &RdmaNic::Tick, this);
}

inline void
RdmaNic::Tick()
{
    if (m_paused)
    {
        return; // SetPaused(false) kicks it again
    }
    if (m_dev && m_dev->Waiting() > 0)
    {
        // The device is behind the pacing clock (the host's CNPs, ACKs and NACKs share its
        // wire): hand it the next data packet when its queue is empty, so that it never
        // holds more data than one packet when PFC pauses the NIC. A device that only carries
        // this NIC's data never has a packet waiting here: the same packets, the same times.
        m_dev->WaitForDrain(this);
        return;
    }
    double now = Simulator::Now().GetSeconds();
    RdmaTransport& T = *m_transport;
    const Params& P = T.P;
    uint32_t payload = T.Payload();
    Qp* pick = nullptr;
    size_t n = m_active.size();
    size_t scan = m_timed ? std::min(n, SCAN_FIRST) : n;
    for (size_t k = 0; k < scan; k++)
    {
        size_t i = (m_rr + k) % n;
        Qp* q = m_active[i];
        if (q->flow < 0 || q->sndNxt >= q->bytes || (q->win > 0 && double(q->sndNxt - q->sndUna) >= q->win))
        {
            continue;
        }
        if (q->nextAvail <= now + 1e-9)
        {
            pick = q;
            m_rr = i + 1;
            break;
        }
    }
    if (!pick && scan < n)
    {
        pick = PickFromHeap(now); // none ready among the first places: the nearest ready one
    }
    if (pick)
    {
        uint32_t size = uint32_t(std::min<uint64_t>(payload, pick->bytes - pick->sndNxt));
        Ptr<Packet> p = Create<Packet>(size);
        if (P.reliable)
        {
            RdmaTag t;
            t.kind = RdmaTag::kData;
            t.seq = pick->sndNxt;
            t.intOn = T.ccTraits.intOn;
            p->AddPacketTag(t);
            pick->loss->OnSend(now);
        }
        T.SendData(pick, p);
        pick->sndNxt += size;
        pick->cc->OnSent(size);
        double wire = double(size + 30 + T.ccTraits.intBytes) * 8.0; // + IPv4, UDP, PPP (and INT)
        // Ticks land on whole nanoseconds (CeilTime); a packet sent back to back continues
        // from the exact end of the previous one, so the rounding does not add up.
        double base = now - m_busyUntil < 1e-9 ? m_busyUntil : now;
        m_busyUntil = base + wire / m_lineBps;
        double qbase = now - pick->nextAvail < 1e-9 ? pick->nextAvail : now;
        pick->nextAvail = qbase + wire / std::max(pick->rc, 1.0);
        Listed(pick);
        if (pick->sndNxt > pick->maxSent)
        {
            pick->maxSent = pick->sndNxt;
            if (pick->maxSent >= pick->bytes)
            {
                // Fully sent: the next chunk on the connection may start. The queue pair
                // keeps reacting to CNPs, ACKs and NACKs until the receiver has every byte.
                Simulator::ScheduleNow(&FlowEvents::FlowSent, &T.m_events, pick->flow);
            }
        }
        if (pick->sndNxt >= pick->bytes)
        {
            m_dirty = true;
        }
    }
    if (m_dirty)
    {
        // compact the list: queue pairs with nothing left to send leave the scheduler
        std::vector<Qp*> keep;
        keep.reserve(m_active.size());
        for (Qp* q : m_active)
        {
            if (q->flow >= 0 && q->sndNxt < q->bytes)
            {
                q->pos = keep.size();
                keep.push_back(q);
            }
            else
            {
                q->inActive = false;
            }
        }
        m_active.swap(keep);
        m_rr = 0;
        m_dirty = false;
    }
    double earliest = 1e300;
    if (m_timed)
    {
        DropStale(); // every listed queue pair has one current entry: the top is the earliest
        if (!m_byTime.empty())
        {
            earliest = m_byTime.front().first;
        }
    }
    else
    {
        for (Qp* q : m_active)
        {
            if (q->win > 0 && double(q->sndNxt - q->sndUna) >= q->win)
            {
                continue; // window full: an ACK kicks the NIC
            }
            earliest = std::min(earliest, q->nextAvail);
        }
    }
    if (earliest < 1e300)
    {
        double at = std::max(m_busyUntil, earliest);
        m_tickAt = std::max(at, now + 1e-9);
        m_tick = Simulator::Schedule(CeilTime(std::max(1e-9, at - now)), &RdmaNic::Tick, this);
    }
}

inline void
RdmaNic::Listed(Qp* q)
{
    if (m_timed && q->inActive && q->sndNxt < q->bytes)
    {
        m_byTime.emplace_back(q->nextAvail, q);
        std::push_heap(m_byTime.begin(), m_byTime.end(), Later);
    }
}

inline void
RdmaNic::DropStale()
{
    while (!m_byTime.empty() && !Current(m_byTime.front()))
    {
        std::pop_heap(m_byTime.begin(), m_byTime.end(), Later);
        m_byTime.pop_back();
    }
}

// The ready queue pair (pacing time within 1 ns of now) nearest the round-robin position
// in list order, as the plain pass would find it, or null; moves m_rr past it. The ready
// entries are popped, the one picked is dropped (its time moves when it sends) and the
// others are pushed back.
inline Qp*
RdmaNic::PickFromHeap(double now)
{
    size_t n = m_active.size();
    std::vector<std::pair<double, Qp*>>& ready = m_ready;
    ready.clear();
    Qp* best = nullptr;
    size_t bestDist = n;
    while (true)
    {
        DropStale();
        if (m_byTime.empty() || m_byTime.front().first > now + 1e-9)
        {
            break;
        }
        std::pop_heap(m_byTime.begin(), m_byTime.end(), Later);
        std::pair<double, Qp*> e = m_byTime.back();
        m_byTime.pop_back();
        ready.push_back(e);
        size_t dist = (e.second->pos + n - m_rr % n) % n;
        if (dist < bestDist)
        {
            bestDist = dist;
            best = e.second;
        }
    }
    for (const auto& e : ready)
    {
        if (e.second != best)
        {
            m_byTime.push_back(e);
            std::push_heap(m_byTime.begin(), m_byTime.end(), Later);
        }
    }
    if (best)
    {
        m_rr = best->pos + 1;
    }
    return best;
}

} // namespace tsim

