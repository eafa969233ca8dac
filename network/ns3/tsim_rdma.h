// trainsim ns-3 core, part 4 of 7: the RDMA transport (--transport rdma). Every host has a
// RoCE-like NIC (RdmaNic) whose queue pairs (Qp, one per flow) are served round-robin at
// no more than the line rate, each no faster than its own congestion-control rate (and,
// under HPCC, no more than its window in flight): a NIC never queues more than a packet
// in its own device, so all queueing (and ECN marking) happens in the switches, as with
// RoCE. Data are UDP datagrams to port kRdmaPort. RdmaTransport owns the NICs and queue
// pairs and reports flows sent and delivered through FlowEvents.
//
// Congestion control (Params::cc):
// - DCQCN (Zhu et al., SIGCOMM 2015, with NVIDIA ConnectX's timers): the receiver (NP)
//   answers CE-marked packets with a CNP, at most one per flow per cnpInterval; the sender
//   (RP) cuts Rc by alpha/2 at most once per rateDecreaseInterval, keeps alpha per
//   alphaInterval period (up with a CNP in the period, down without; computed lazily, no
//   event per period) and raises the rate by timer and byte counter (fast recovery,
//   additive, hyper increase).
// - HPCC (Li et al., SIGCOMM 2019): switches push INT hop records onto data packets
//   (EcnQueueDisc), the receiver returns them on a per-packet ACK, and the sender computes
//   the bottleneck's normalised inflight U per ACK and sets its window W (rate W/T) with
//   the paper's multiplicative/additive rule (eta, maxStage, W_AI).
//
// Reliability (Params::reliable: HPCC, or a fabric with link error rates): data carry
// their byte offset (RdmaTag), the receiver ACKs every packet in order, answers a gap with
// a NACK naming the byte it expects, and drops out-of-order packets; the sender rewinds to
// the NACKed byte (go-back-N, as RoCE RC NICs do) and, after rto without an ACK, to the
// last ACKed byte. Without it the fabric is lossless and the receiver just counts bytes.
//
// Units: seconds (double) for times, bits/s for rates (Qp::rc, rt; NIC line rate), bytes
// for sizes, windows and counters.
#pragma once

#include "tsim_common.h"
#include "tsim_fabric.h"

namespace tsim
{

// One RDMA flow's sender state (and, keyed by the same flow, its receiver's CNP/NACK clocks).
struct Qp
{
    int32_t flow{-1}; // -1 once delivered: the NIC drops it from its list lazily
    Ptr<Socket> sock;
    uint32_t src{0};
    uint64_t bytes{0};
    double line{0};        // the NIC's line rate, bits/s
    uint64_t sndNxt{0};    // next byte to send (go-back-N rewinds it)
    uint64_t sndUna{0};    // bytes acknowledged (reliable mode)
    uint64_t maxSent{0};   // the furthest sndNxt has been
    bool inActive{false};  // in its NIC's round-robin list
    double rc{0}, rt{0};   // current and target rate, bits/s
    double nextAvail{0};   // s: earliest time its next packet may leave (pacing at rc)
    // DCQCN reaction point
    double alpha{1.0};
    double alphaPeriodStart{-1}; // s: start of the current alpha period; -1 before the first CNP
    bool cnpInPeriod{false};     // a CNP arrived in the current alpha period
    double lastDecrease{-1};     // s; -1 = never
    bool cutPending{false};      // a CNP arrived too soon after the last cut: cut when allowed
    bool timerIncSinceCut{false};
    int stage{0};          // timer stages since the last cut (DCQCN's T)
    int bcStage{0};        // byte-counter stages since the last cut (DCQCN's BC)
    uint64_t bcBytes{0};   // bytes sent in the current byte-counter stage
    EventId cutEvent, rateTimer;
    // HPCC
    double baseRtt{0};     // T, s
    double win{0};         // bytes allowed in flight; 0 = no window (DCQCN)
    double wc{0};          // reference window, bytes
    double u{0};           // EWMA of the bottleneck's normalised inflight
    int incStage{0};
    uint64_t lastUpdateSeq{0};
    bool haveInt{false};
    uint8_t nhop{0};
    IntHop hop[kMaxIntHops];
    // go-back-N
    double lastProgress{0}; // s: last ACK progress (or start of sending)
    EventId rtoEvent;
    // receiver side, keyed by the same flow
    double lastCnpSent{-1};
    uint64_t lastNackSeq{~uint64_t(0)};
    double lastNackTime{-1};
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
    double m_tickAt{0};        // s: when m_tick fires
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
    std::unordered_map<uint64_t, double> rttCache; // (src, dst) -> base RTT, s
    // totals (read by tests and reports)
    uint64_t retxBytes{0};   // payload bytes sent again after a NACK or timeout
    uint64_t timeouts{0};    // go-back-N rewinds by timeout
    uint64_t nacksReceived{0};
    uint64_t oooDropped{0};  // data packets the receivers discarded (out of order)
    uint64_t cuts{0};        // DCQCN rate cuts

    void Init(uint32_t nHosts)
    {
        nics.resize(nHosts);
        for (uint32_t h = 0; h < nHosts; h++)
        {
            nics[h].m_transport = this;
            nics[h].m_host = h;
        }
    }

    // Payload bytes of one data packet: MTU - IPv4 20 - UDP 8, and under HPCC minus the
    // INT bytes the packet reserves for the switches' hop records.
    uint32_t Payload() const
    {
        return P.mtu - 28 - (P.cc == kCcHpcc ? P.hpccIntBytes : 0);
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

    // A queue pair for flow id, sending from source port `port`, at line rate to begin with.
    void StartFlow(int32_t id, uint16_t port)
    {
        Flow& f = m_flows[id];
        Ptr<Node> n = m_fabric.Host(f.src);
        qpStore.emplace_back();
        Qp* q = &qpStore.back();
        q->flow = id;
        q->src = f.src;
        q->bytes = f.bytes;
        q->line = nics[f.src].m_lineBps;
        q->rc = q->rt = q->line;
        q->nextAvail = f.start;
        q->lastProgress = f.start;
        if (P.cc == kCcHpcc)
        {
            q->baseRtt = PathRtt(f.src, f.dst);
            q->win = q->wc = q->line * q->baseRtt / 8.0;
        }
        q->sock = Socket::CreateSocket(n, UdpSocketFactory::GetTypeId());
        q->sock->SetIpTos(kDataTos);
        q->sock->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
        q->sock->Connect(InetSocketAddress(Ipv4Address(kBaseAddr + f.dst), kRdmaPort));
        q->sock->SetRecvCallback(MakeCallback(&RdmaTransport::ReceiveCtrl, this));
        qpOfFlow[id] = q;
        if (P.reliable)
        {
            q->rtoEvent = Simulator::Schedule(Seconds(P.rto), &RdmaTransport::CheckRto, this, q);
        }
        Activate(q);
    }

    void Activate(Qp* q)
    {
        if (!q->inActive)
        {
            q->inActive = true;
            nics[q->src].m_active.push_back(q);
        }
        nics[q->src].Kick();
    }

    // ---------------- receiver (notification point) ----------------
    void SendCtrl(Ptr<Socket> s, const Address& to, uint32_t host, uint8_t kind, uint64_t seq, const RdmaTag* data)
    {
        Ptr<Packet> p = Create<Packet>(34); // 64 bytes on the wire with IPv4, UDP and PPP
        RdmaTag t;
        t.kind = kind;
        t.seq = seq;
        if (data && P.cc == kCcHpcc)
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
    // it also ACKs or NACKs), answers CE marks with a CNP under DCQCN and reports the flow
    // delivered with its last byte.
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
            if (P.cc == kCcDcqcn && p->PeekPacketTag(tos) && (tos.GetTos() & 0x3) == 0x3 && qp() &&
                (q->lastCnpSent < 0 || now - q->lastCnpSent >= P.cnpInterval - 1e-12))
            {
                q->lastCnpSent = now;
                s->SendTo(Create<Packet>(16), 0, from);
                m_fabric.hostCnpsSent[f.dst]++;
            }
            if (P.reliable)
            {
                RdmaTag t;
                if (!qp() || !p->PeekPacketTag(t))
                {
                    continue;
                }
                if (t.seq == f.rcvd)
                {
                    f.rcvd += p->GetSize();
                    SendCtrl(s, from, f.dst, RdmaTag::kAck, f.rcvd, &t);
                }
                else if (t.seq > f.rcvd)
                {
                    oooDropped++;
                    if (q->lastNackSeq != f.rcvd || now - q->lastNackTime >= P.nackInterval)
                    {
                        q->lastNackSeq = f.rcvd;
                        q->lastNackTime = now;
                        SendCtrl(s, from, f.dst, RdmaTag::kNack, f.rcvd, nullptr);
                    }
                    continue;
                }
                else
                {
                    SendCtrl(s, from, f.dst, RdmaTag::kAck, f.rcvd, &t); // a duplicate
                    continue;
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
                    q->cutEvent.Cancel();
                    q->rateTimer.Cancel();
                    q->rtoEvent.Cancel();
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

    // ---------------- sender (reaction point) ----------------
    // CNPs (no tag), ACKs and NACKs arriving on a queue pair's socket.
    void ReceiveCtrl(Ptr<Socket> s)
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
            Qp* q = qi->second;
            RdmaTag t;
            if (!p->PeekPacketTag(t))
            {
                OnCnp(q);
            }
            else if (t.kind == RdmaTag::kNack)
            {
                OnNack(q, t.seq);
            }
            else
            {
                OnAck(q, t);
            }
        }
    }

    void OnAck(Qp* q, const RdmaTag& t)
    {
        bool blocked = q->win > 0 && double(q->sndNxt - q->sndUna) >= q->win;
        if (t.seq > q->sndUna)
        {
            q->sndUna = std::min<uint64_t>(t.seq, q->bytes);
            q->lastProgress = Simulator::Now().GetSeconds();
            if (q->sndNxt < q->sndUna)
            {
                q->sndNxt = q->sndUna;
            }
        }
        if (P.cc == kCcHpcc)
        {
            HpccUpdate(q, t);
        }
        if (blocked || P.cc == kCcHpcc)
        {
            nics[q->src].Kick();
        }
    }

    void OnNack(Qp* q, uint64_t seq)
    {
        nacksReceived++;
        if (seq > q->sndUna)
        {
            q->sndUna = std::min<uint64_t>(seq, q->bytes);
        }
        q->lastProgress = Simulator::Now().GetSeconds();
        Rewind(q, seq);
    }

    // Go-back-N: send again from byte seq.
    void Rewind(Qp* q, uint64_t seq)
    {
        if (seq < q->sndNxt)
        {
            retxBytes += q->sndNxt - seq;
            q->sndNxt = seq;
            Activate(q);
        }
    }

    void CheckRto(Qp* q)
    {
        if (q->flow < 0)
        {
            return;
        }
        double now = Simulator::Now().GetSeconds();
        if (q->sndNxt > q->sndUna && now - q->lastProgress >= P.rto - 1e-12)
        {
            timeouts++;
            q->lastProgress = now;
            Rewind(q, q->sndUna);
        }
        if (q->sndNxt == q->sndUna)
        {
            q->lastProgress = now; // nothing in flight: nothing to time out
        }
        q->rtoEvent = Simulator::Schedule(CeilTime(q->lastProgress + P.rto - now), &RdmaTransport::CheckRto, this, q);
    }

    // HPCC (Li et al., SIGCOMM 2019, Algorithm 1): per ACK, the normalised inflight of the
    // most loaded hop, U = qlen / (B T) + txRate / B, smoothed over a base RTT; the window
    // is Wc / (U / eta) + W_AI when U >= eta or after maxStage additive steps, else
    // Wc + W_AI; the reference window Wc moves once per RTT (ACKs past lastUpdateSeq).
    void HpccUpdate(Qp* q, const RdmaTag& t)
    {
        if (!q->haveInt)
        {
            q->haveInt = true;
            q->nhop = t.nhop;
            for (uint32_t i = 0; i < t.nhop; i++)
            {
                q->hop[i] = t.hop[i];
            }
            q->lastUpdateSeq = q->sndNxt;
            return;
        }
        bool update = t.seq > q->lastUpdateSeq;
        double T = q->baseRtt;
        double U = 0, tau = 0;
        bool any = false;
        uint32_t n = std::min<uint32_t>(t.nhop, q->nhop);
        for (uint32_t i = 0; i < n; i++)
        {
            const IntHop& h = t.hop[i];
            const IntHop& o = q->hop[i];
            if (h.tsNs <= o.tsNs)
            {
                continue;
            }
            double dt = double(h.tsNs - o.tsNs) * 1e-9;
            double B = double(h.bps);
            double txRate = double(h.txBytes - o.txBytes) * 8.0 / dt;
            double uu = txRate / B + double(std::min(h.qlen, o.qlen)) * 8.0 / (B * T);
            if (!any || uu > U)
            {
                U = uu;
                tau = dt;
                any = true;
            }
        }
        q->nhop = t.nhop;
        for (uint32_t i = 0; i < t.nhop; i++)
        {
            q->hop[i] = t.hop[i];
        }
        if (any)
        {
            tau = std::min(tau, T);
            q->u = (1 - tau / T) * q->u + tau / T * U;
            double wmax = q->line * T / 8.0;
            double wmin = P.minRate * T / 8.0;
            double wai = P.hpccRateAiFraction * q->line * T / 8.0;
            double w;
            if (q->u >= P.hpccEta || q->incStage >= P.hpccMaxStage)
            {
                w = q->wc / std::max(q->u / P.hpccEta, 1e-9) + wai;
                if (update)
                {
                    q->incStage = 0;
                }
            }
            else
            {
                w = q->wc + wai;
                if (update)
                {
                    q->incStage++;
                }
            }
            w = std::max(wmin, std::min(wmax, w));
            if (update)
            {
                q->wc = w;
            }
            q->win = w;
            q->rc = w * 8.0 / T;
        }
        if (update)
        {
            q->lastUpdateSeq = q->sndNxt;
        }
    }

    // DCQCN's alpha, brought up to `now`: every alphaInterval period ends with
    // alpha <- (1-g) alpha + g if a CNP arrived in it, (1-g) alpha if not (ConnectX's
    // dce_tcp_g / dce_tcp_rtt). Computed when needed instead of by a timer per period.
    void AdvanceAlpha(Qp* q, double now)
    {
        if (q->alphaPeriodStart < 0)
        {
            return;
        }
        double k = std::floor((now - q->alphaPeriodStart) / P.alphaInterval + 1e-9);
        if (k < 1)
        {
            return;
        }
        q->alphaPeriodStart += k * P.alphaInterval;
        if (q->cnpInPeriod)
        {
            q->alpha = (1 - P.g) * q->alpha + P.g;
            q->cnpInPeriod = false;
            k -= 1;
        }
        if (k > 0)
        {
            q->alpha *= std::pow(1 - P.g, k);
        }
    }

    // DCQCN reaction point: a CNP. The first one starts alpha at 1 (ConnectX's
    // initial_alpha_value 1023/1024); a cut follows at once, or, within
    // rateDecreaseInterval of the last cut, when that interval ends.
    void OnCnp(Qp* q)
    {
        double now = Simulator::Now().GetSeconds();
        if (q->alphaPeriodStart < 0)
        {
            q->alpha = 1.0;
            q->alphaPeriodStart = now;
            q->cnpInPeriod = false;
        }
        else
        {
            AdvanceAlpha(q, now);
            q->cnpInPeriod = true;
        }
        if (q->lastDecrease < 0 || now - q->lastDecrease >= P.rateDecreaseInterval - 1e-12)
        {
            Cut(q);
        }
        else if (!q->cutPending)
        {
            q->cutPending = true;
            q->cutEvent = Simulator::Schedule(CeilTime(q->lastDecrease + P.rateDecreaseInterval - now),
                                              &RdmaTransport::Cut, this, q);
        }
    }

    // Rt <- Rc (with clampTargetRate, or if the timer has raised the rate since the last
    // cut: ConnectX's clamp_tgt_rate_after_time_inc), Rc <- Rc (1 - alpha/2), counters reset.
    void Cut(Qp* q)
    {
        if (q->flow < 0)
        {
            return;
        }
        double now = Simulator::Now().GetSeconds();
        AdvanceAlpha(q, now);
        cuts++;
        q->cutPending = false;
        q->lastDecrease = now;
        if (P.clampTargetRate || q->timerIncSinceCut || q->rt >= q->line)
        {
            q->rt = q->rc;
        }
        q->rc = std::max(P.minRate, q->rc * (1 - q->alpha / 2));
        q->stage = 0;
        q->bcStage = 0;
        q->bcBytes = 0;
        q->timerIncSinceCut = false;
        q->rateTimer.Cancel();
        q->rateTimer = Simulator::Schedule(Seconds(P.rpTimer), &RdmaTransport::RateIncrease, this, q);
    }

    // Every rpTimer after a cut, until the queue pair is back at line rate: a timer stage.
    void RateIncrease(Qp* q)
    {
        if (q->flow < 0)
        {
            return;
        }
        q->stage++;
        q->timerIncSinceCut = true;
        Increase(q);
        if (q->rc < q->line)
        {
            q->rateTimer = Simulator::Schedule(Seconds(P.rpTimer), &RdmaTransport::RateIncrease, this, q);
        }
    }

    // One increase event (timer or byte counter): fast recovery while both counters are
    // below F, hyper increase once both exceed it, additive increase in between.
    void Increase(Qp* q)
    {
        int F = P.fastRecoveryTimes;
        int hi = std::max(q->stage, q->bcStage);
        int lo = std::min(q->stage, q->bcStage);
        if (hi < F)
        {
            // fast recovery: only Rc moves towards Rt
        }
        else if (lo > F)
        {
            q->rt = std::min(q->line, q->rt + (lo - F) * P.rateHai);
        }
        else
        {
            q->rt = std::min(q->line, q->rt + P.rateAi);
        }
        q->rc = std::min(q->line, (q->rt + q->rc) / 2);
    }

    // The NIC sent `bytes` of q's payload: every byteCounter bytes is a byte-counter stage.
    void OnSent(Qp* q, uint32_t bytes)
    {
        if (P.cc != 0 || q->rc >= q->line)
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
    double now = Simulator::Now().GetSeconds();
    RdmaTransport& T = *m_transport;
    const Params& P = T.P;
    uint32_t payload = T.Payload();
    Qp* pick = nullptr;
    size_t n = m_active.size();
    for (size_t k = 0; k < n; k++)
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
    if (pick)
    {
        uint32_t size = uint32_t(std::min<uint64_t>(payload, pick->bytes - pick->sndNxt));
        Ptr<Packet> p = Create<Packet>(size);
        if (P.reliable)
        {
            RdmaTag t;
            t.kind = RdmaTag::kData;
            t.seq = pick->sndNxt;
            t.intOn = P.cc == kCcHpcc;
            p->AddPacketTag(t);
            if (pick->sndNxt == pick->sndUna)
            {
                pick->lastProgress = now; // the RTO counts from the first packet in flight
            }
        }
        pick->sock->Send(p);
        pick->sndNxt += size;
        T.OnSent(pick, size);
        double wire = double(size + 30 + (P.cc == kCcHpcc ? P.hpccIntBytes : 0)) * 8.0; // + IPv4, UDP, PPP (and INT)
        // Ticks land on whole nanoseconds (CeilTime); a packet sent back to back continues
        // from the exact end of the previous one, so the rounding does not add up.
        double base = now - m_busyUntil < 1e-9 ? m_busyUntil : now;
        m_busyUntil = base + wire / m_lineBps;
        double qbase = now - pick->nextAvail < 1e-9 ? pick->nextAvail : now;
        pick->nextAvail = qbase + wire / std::max(pick->rc, 1.0);
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
    for (Qp* q : m_active)
    {
        if (q->win > 0 && double(q->sndNxt - q->sndUna) >= q->win)
        {
            continue; // window full: an ACK kicks the NIC
        }
        earliest = std::min(earliest, q->nextAvail);
    }
    if (earliest < 1e300)
    {
        double at = std::max(m_busyUntil, earliest);
        m_tickAt = std::max(at, now + 1e-9);
        m_tick = Simulator::Schedule(CeilTime(std::max(1e-9, at - now)), &RdmaNic::Tick, this);
    }
}

} // namespace tsim
