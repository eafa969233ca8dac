// trainsim ns-3 core, part 4 of 7: the RDMA transport (--transport rdma). Every host has a
// RoCE-like NIC (RdmaNic) whose queue pairs (Qp, one per flow) are served round-robin at
// no more than the line rate, each no faster than its own DCQCN rate: a NIC never queues
// more than a packet in its own device, so all queueing (and ECN marking) happens in the
// switches, as with RoCE. Data are UDP datagrams to port kRdmaPort; a receiver answers
// CE-marked packets with a CNP (at most one per cnpInterval per flow), and the sender's
// DCQCN reaction point (Zhu et al., SIGCOMM 2015, with SimAI.conf's parameter names) cuts
// and recovers the queue pair's rate. RdmaTransport owns the NICs and queue pairs and
// reports flows sent and delivered through FlowEvents.
//
// Units: seconds (double) for times, bits/s for rates (Qp::rc, rt; NIC line rate), bytes
// for sizes and counters.
#pragma once

#include "tsim_common.h"
#include "tsim_fabric.h"

namespace tsim
{

// One RDMA flow's sender state (and, keyed by the same flow, its receiver's CNP clock).
struct Qp
{
    int32_t flow{-1};          // -1 once delivered: the NIC drops it from its list lazily
    Ptr<Socket> sock;
    uint64_t sent{0};          // bytes handed to the socket
    double rc{0}, rt{0}, alpha{1.0}; // DCQCN current and target rate (bits/s), alpha
    double nextAvail{0};       // s: earliest time its next packet may leave (pacing at rc)
    double lastDecrease{-1};   // s; -1 = never
    bool cnpSeen{false};       // a CNP arrived since the last alpha update
    int stage{0};   // timer stages since the last cut (DCQCN's T)
    int bcStage{0}; // byte-counter stages since the last cut (DCQCN's BC)
    uint64_t bcBytes{0};       // bytes sent in the current byte-counter stage
    EventId alphaTimer, rateTimer;
    double lastCnpSent{-1}; // receiver side, keyed by the same flow; s, -1 = never
};

class RdmaTransport;

// One host's NIC: a round-robin scheduler over its queue pairs with data to send.
class RdmaNic
{
  public:
    RdmaTransport* m_transport{nullptr};
    uint32_t m_host{0};
    double m_lineBps{0};
    std::vector<Qp*> m_active; // queue pairs with bytes left to send
    size_t m_rr{0};            // round-robin position in m_active
    EventId m_tick;
    double m_busyUntil{0};     // s: the device is sending until then
    bool m_dirty{false};       // m_active holds queue pairs to drop
    bool m_paused{false};      // PFC: the switch port above has paused the data class

    void Kick();
    void Tick();
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
    std::vector<RdmaNic> nics;           // per host
    std::vector<Ptr<Socket>> receivers;  // per host: the UDP socket on kRdmaPort
    std::unordered_map<int32_t, Qp*> qpOfFlow; // flows in flight -> their queue pair
    std::deque<Qp> qpStore; // stable addresses; one per RDMA flow of the run

    void Init(uint32_t nHosts)
    {
        nics.resize(nHosts);
        for (uint32_t h = 0; h < nHosts; h++)
        {
            nics[h].m_transport = this;
            nics[h].m_host = h;
        }
    }

    // Opens host h's receiver and sets its NIC's line rate (its links exist by now).
    void StartHost(uint32_t h)
    {
        Ptr<Socket> s = Socket::CreateSocket(m_fabric.Host(h), UdpSocketFactory::GetTypeId());
        s->SetIpRecvTos(true);
        s->SetIpTos(kCnpTos); // this socket sends only CNPs: the high-priority class
        s->Bind(InetSocketAddress(Ipv4Address::GetAny(), kRdmaPort));
        s->SetRecvCallback(MakeCallback(&RdmaTransport::Receive, this));
        receivers.push_back(s);
        nics[h].m_lineBps = m_fabric.hostLineBps[h];
    }

    // PFC from the host's switch port: stop or resume sending data.
    void SetPaused(uint32_t host, bool paused)
    {
        nics[host].m_paused = paused;
        if (!paused)
        {
            nics[host].Kick();
        }
    }

    // A queue pair for flow id, sending from source port `port`, at line rate to begin with.
    void StartFlow(int32_t id, uint16_t port)
    {
        Flow& f = m_flows[id];
        Ptr<Node> n = m_fabric.Host(f.src);
        qpStore.emplace_back();
        Qp* q = &qpStore.back();
        q->flow = id;
        q->rc = q->rt = nics[f.src].m_lineBps;
        q->nextAvail = f.start;
        q->sock = Socket::CreateSocket(n, UdpSocketFactory::GetTypeId());
        q->sock->SetIpTos(kDataTos);
        q->sock->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
        q->sock->Connect(InetSocketAddress(Ipv4Address(kBaseAddr + f.dst), kRdmaPort));
        q->sock->SetRecvCallback(MakeCallback(&RdmaTransport::ReceiveCnp, this));
        qpOfFlow[id] = q;
        nics[f.src].m_active.push_back(q);
        nics[f.src].Kick();
    }

    // Receiver: data packets. Counts the flow's bytes, answers CE marks with a CNP and
    // reports the flow delivered with its last byte.
    void Receive(Ptr<Socket> s)
    {
        Address from;
        Ptr<Packet> p;
        while ((p = s->RecvFrom(from)))
        {
            InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
            uint32_t srcHost = a.GetIpv4().Get() - kBaseAddr;
            int32_t id = m_flows.FindBySource(srcHost, a.GetPort());
            if (id < 0)
            {
                continue;
            }
            Flow& f = m_flows[id];
            f.rcvd += p->GetSize();
            SocketIpTosTag tos;
            if (p->PeekPacketTag(tos) && (tos.GetTos() & 0x3) == 0x3)
            {
                auto qi = qpOfFlow.find(id);
                double now = Simulator::Now().GetSeconds();
                if (qi != qpOfFlow.end() &&
                    (qi->second->lastCnpSent < 0 || now - qi->second->lastCnpSent >= P.cnpInterval))
                {
                    qi->second->lastCnpSent = now;
                    s->SendTo(Create<Packet>(16), 0, from);
                    m_fabric.hostCnpsSent[f.dst]++;
                }
            }
            if (f.rcvd >= f.bytes)
            {
                auto qi = qpOfFlow.find(id);
                if (qi != qpOfFlow.end())
                {
                    Qp* q = qi->second;
                    q->alphaTimer.Cancel();
                    q->rateTimer.Cancel();
                    q->sock->Close();
                    q->sock = nullptr;
                    q->flow = -1; // the NIC drops it from its list lazily
                    nics[f.src].m_dirty = true;
                    qpOfFlow.erase(qi);
                }
                m_events.FlowDone(id);
            }
        }
    }

    // Sender: CNPs arriving on a queue pair's socket.
    void ReceiveCnp(Ptr<Socket> s)
    {
        Ptr<Packet> p;
        while ((p = s->Recv()))
        {
            Address local;
            s->GetSockName(local);
            uint16_t port = InetSocketAddress::ConvertFrom(local).GetPort();
            uint32_t host = m_fabric.HostOf(s->GetNode());
            int32_t id = m_flows.FindBySource(host, port);
            if (id < 0)
            {
                continue;
            }
            auto qi = qpOfFlow.find(id);
            if (qi == qpOfFlow.end())
            {
                continue;
            }
            OnCnp(qi->second);
        }
    }

    // DCQCN reaction point: rate cut on a CNP (at most one per rateDecreaseInterval).
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
        q->rateTimer = Simulator::Schedule(Seconds(P.rpTimer), &RdmaTransport::RateIncrease, this, q);
        if (!q->alphaTimer.IsPending())
        {
            q->alphaTimer =
                Simulator::Schedule(Seconds(P.alphaInterval), &RdmaTransport::AlphaUpdate, this, q);
        }
    }

    // Every alphaInterval: alpha decays unless a CNP arrived in the last interval.
    void AlphaUpdate(Qp* q)
    {
        if (!q->cnpSeen)
        {
            q->alpha = (1 - P.g) * q->alpha;
        }
        q->cnpSeen = false;
        if (q->alpha > 1e-6 || q->rc < nics[m_flows[q->flow].src].m_lineBps)
        {
            q->alphaTimer = Simulator::Schedule(Seconds(P.alphaInterval), &RdmaTransport::AlphaUpdate, this, q);
        }
    }

    // Every rpTimer after a cut, until the queue pair is back at line rate: a timer stage.
    void RateIncrease(Qp* q)
    {
        q->stage++;
        Increase(q);
        double line = nics[m_flows[q->flow].src].m_lineBps;
        if (q->rc < line)
        {
            q->rateTimer = Simulator::Schedule(Seconds(P.rpTimer), &RdmaTransport::RateIncrease, this, q);
        }
    }

    // One increase event (timer or byte counter): fast recovery while both counters are
    // below F, hyper increase once both exceed it, additive increase in between.
    void Increase(Qp* q)
    {
        double line = nics[m_flows[q->flow].src].m_lineBps;
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

    // The NIC sent `bytes` of q's payload: every byteCounter bytes is a byte-counter stage.
    void OnSent(Qp* q, uint32_t bytes)
    {
        if (q->rc >= nics[m_flows[q->flow].src].m_lineBps)
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
};

inline void
RdmaNic::Kick()
{
    if (m_tick.IsPending() || m_paused)
    {
        return;
    }
    double now = Simulator::Now().GetSeconds();
    double at = std::max(now, m_busyUntil);
    m_tick = Simulator::Schedule(CeilTime(at - now), &RdmaNic::Tick, this);
}

inline void
RdmaNic::Tick()
{
    if (m_paused)
    {
        return; // SetPaused(false) kicks it again
    }
    double now = Simulator::Now().GetSeconds();
    const Params& P = m_transport->P;
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
        Flow& f = m_transport->m_flows[pick->flow];
        uint32_t size = uint32_t(std::min<uint64_t>(payload, f.bytes - pick->sent));
        pick->sock->Send(Create<Packet>(size));
        pick->sent += size;
        m_transport->OnSent(pick, size);
        double wire = double(size + 30) * 8.0; // + IPv4, UDP and PPP headers
        // Ticks land on whole nanoseconds (CeilTime); a packet sent back to back continues
        // from the exact end of the previous one, so the rounding does not add up.
        double base = now - m_busyUntil < 1e-9 ? m_busyUntil : now;
        m_busyUntil = base + wire / m_lineBps;
        double qbase = now - pick->nextAvail < 1e-9 ? pick->nextAvail : now;
        pick->nextAvail = qbase + wire / std::max(pick->rc, 1.0);
        if (pick->sent >= f.bytes)
        {
            // Fully sent: it leaves the scheduler but keeps reacting to CNPs until the
            // receiver reports completion.
            pick->nextAvail = 1e300;
            m_dirty = true;
            Simulator::ScheduleNow(&FlowEvents::FlowSent, &m_transport->m_events, pick->flow);
        }
    }
    if (m_dirty)
    {
        // compact the list: queue pairs with nothing left to send leave the scheduler
        std::vector<Qp*> keep;
        keep.reserve(m_active.size());
        for (Qp* q : m_active)
        {
            if (q->flow >= 0 && q->sent < m_transport->m_flows[q->flow].bytes)
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
