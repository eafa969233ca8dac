// trainsim ns-3 core, the switch models: what a switch does to the packets it forwards.
// SwitchMmu is one switch's shared buffer with per-ingress-port accounting and PFC
// (XOFF/XON with headroom); EcnQueueDisc is one switch egress port: two strict-priority
// classes, ECN marking, PFC pause of the data class, INT stamping for HPCC, and the port's
// counters. They know nothing about nodes, links or routing: the fabric builder
// (tsim_fabric.h) creates them, sets their parameters and wires them (a port to its
// switch's MMU, the MMU's pause frames to the upstream device), as ns-3's models are kept
// apart from the helpers that install them.
//
// Units: seconds for times, bits/s for rates, bytes for buffers, queues and thresholds.
#pragma once

#include "tsim_common.h"

namespace tsim
{

// Packets a switch port's device takes from its queue disc ahead of transmission (they
// can no longer be paused; the headroom covers them).
static const uint32_t kSwitchDevicePackets = 1;

// Per ingress port of a switch (indexed by interface): buffer use and PFC state.
struct IngressPort
{
    double bytes{0};       // in the shared buffer
    double headroom{0};    // in the headroom reserve
    double headroomCap{0}; // bytes of headroom reserved
    double peak{0};        // max of bytes + headroom
    bool xoff{false};      // we have paused the upstream device
    uint64_t pausesSent{0};
    uint64_t resumesSent{0};
};

using PauseSender = std::function<void(uint32_t node, uint32_t iface, bool pause)>;

// Switch memory (MMU): one shared buffer per switch, charged to the ingress port each
// packet arrived on, as lossless (PFC) switches account for it. An ingress port may hold
// up to alpha x (free shared buffer) bytes (Choudhury-Hahne dynamic threshold); a packet
// that does not fit sends XOFF (PAUSE for the data class) to the upstream device and is
// kept in the port's headroom, a reserve sized for what is still in flight when the
// pause lands (2 x propagation x rate + the packets the upstream device has committed);
// once the port has drained its headroom and is xonOffset below its threshold, XON
// (resume) goes upstream. Only a packet that finds the headroom full is dropped (0 when
// the headroom is sized right). Without PFC the shared buffer alone limits (tail drop).
class SwitchMmu
{
  public:
    // node, buffer, alpha, xonOffset, pfc: set by Fabric::InstallStack from Params (network/ns3/params.py
    // holds their values and sources); the initialisers below are placeholders.
    uint32_t node{0};
    double buffer{32e6};
    double alpha{0.125};
    double xonOffset{18060};
    bool pfc{true};
    double used{0}; // shared buffer in use
    double peakUsed{0};
    int32_t curIngress{-1}; // set by EcmpRouting::RouteInput while the packet is forwarded
    std::vector<IngressPort> in; // by interface
    PauseSender sendPause;

    double Threshold() const
    {
        return alpha * std::max(0.0, buffer - used);
    }

    // Charges `size` bytes arriving on `port`. Returns 0 (shared), 1 (headroom) or -1 (drop).
    int Admit(int32_t port, double size)
    {
        if (port < 0 || size_t(port) >= in.size())
        {
            return 0; // not from a link (never happens for forwarded packets)
        }
        IngressPort& p = in[port];
        int where;
        if (p.bytes + size <= Threshold() && used + size <= buffer && !(pfc && p.xoff && p.headroom > 0))
        {
            p.bytes += size;
            used += size;
            peakUsed = std::max(peakUsed, used);
            where = 0;
        }
        else if (!pfc)
        {
            return -1;
        }
        else
        {
            if (!p.xoff)
            {
                p.xoff = true;
                p.pausesSent++;
                sendPause(node, uint32_t(port), true);
            }
            if (p.headroom + size > p.headroomCap)
            {
                return -1;
            }
            p.headroom += size;
            where = 1;
        }
        p.peak = std::max(p.peak, p.bytes + p.headroom);
        return where;
    }

    void Release(int32_t port, double size, int where)
    {
        if (port < 0 || size_t(port) >= in.size())
        {
            return;
        }
        IngressPort& p = in[port];
        if (where == 1)
        {
            p.headroom -= size;
        }
        else
        {
            p.bytes -= size;
            used -= size;
        }
        if (p.xoff && p.headroom <= 0 && p.bytes + xonOffset <= Threshold())
        {
            p.xoff = false;
            p.resumesSent++;
            sendPause(node, uint32_t(port), false);
        }
    }
};

// ---------------------------------------------------------------------------------------
// Switch egress port: two strict-priority classes. Class 0 carries the control packets
// (TOS kCnpTos: CNPs, and the ACKs/NACKs of the reliable mode) and is never paused; class 1
// carries data: a FIFO that marks ECN-capable packets CE with probability rising linearly
// from 0 at Kmin to Pmax at Kmax bytes of this port's data queue, and 1 above Kmax
// (DCQCN's RED-style marking; Kmin = Kmax gives DCTCP's step), and that stops while the
// downstream device has paused it (PFC). Marking happens as a packet leaves the queue
// (ecnAtDequeue, the default: the mark then reflects the queue without waiting behind it,
// as in shared-buffer ASICs and SimAI's/HPCC's ns-3 switch) or as it joins it. Data
// packets that carry INT (HPCC) get this port's hop record (queue, bytes sent, time,
// rate) pushed as they leave. Every data packet is charged to its ingress port in the
// switch's MMU until it leaves.
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
    bool m_ecn{true};
    bool m_ecnAtDequeue{true};
    bool m_int{false};        // HPCC: data packets may carry INT (else their tags are never read here)
    uint32_t* m_peak{nullptr}; // deepest queue (bytes, both classes) so far: the link's LinkStat::peakQueue
    double m_bps{0};          // the port's line rate (INT)
    uint64_t m_txBytes{0};    // bytes dequeued, all classes (INT)
    SwitchMmu* m_mmu{nullptr};
    Ptr<UniformRandomVariable> m_uv;
    // per-port counters (links.csv)
    uint64_t m_ecnMarks{0};
    uint64_t m_cnps{0};
    uint64_t m_acks{0};
    uint64_t m_nacks{0};
    uint64_t m_pausesReceived{0};
    double m_pausedSince{-1};
    double m_pausedTotal{0};
    bool m_paused{false};
    std::deque<std::pair<int32_t, int>> m_charge; // data queue: (ingress port, where) per packet
    // the two internal queues (control, data), cached: the base class hands out Ptr copies
    InternalQueue* m_q[2]{nullptr, nullptr};

    void SetStream(int64_t s)
    {
        m_uv->SetStream(s);
    }

    void SetPaused(bool paused)
    {
        double now = Simulator::Now().GetSeconds();
        if (paused && !m_paused)
        {
            m_pausesReceived++;
            m_pausedSince = now;
        }
        else if (!paused && m_paused)
        {
            m_pausedTotal += now - m_pausedSince;
        }
        m_paused = paused;
        if (!paused)
        {
            Run(); // the device may have gone idle while paused
        }
    }

    double PausedSeconds() const
    {
        return m_pausedTotal + (m_paused ? Simulator::Now().GetSeconds() - m_pausedSince : 0.0);
    }

  private:
    // Control class (CNP, ACK, NACK)? Everything a switch forwards is IPv4 (point-to-point
    // links need no ARP), so the item is an Ipv4QueueDiscItem: no dynamic_cast per packet.
    static bool IsCnp(const Ptr<QueueDiscItem>& item)
    {
        if (item->GetProtocol() != Ipv4L3Protocol::PROT_NUMBER)
        {
            return false;
        }
        return static_cast<const Ipv4QueueDiscItem*>(PeekPointer(item))->GetHeader().GetTos() == kCnpTos;
    }

    // The deepest this port's queue has been, both classes (what its BytesInQueue trace
    // reported before; the queue only deepens on an enqueue).
    void NotePeak()
    {
        if (m_peak)
        {
            uint32_t b = GetNBytes();
            if (b > *m_peak)
            {
                *m_peak = b;
            }
        }
    }

    // CE-marks an ECN-capable data packet with the RED-style probability for a data
    // queue of q bytes.
    void MaybeMark(Ptr<QueueDiscItem> item, double q)
    {
        double p = q < m_kmin ? 0.0 : (q >= m_kmax ? 1.0 : m_pmax * (q - m_kmin) / (m_kmax - m_kmin));
        if (p > 0 && (p >= 1.0 || m_uv->GetValue() < p) && Mark(item, "ecn threshold"))
        {
            m_ecnMarks++;
        }
    }

    bool DoEnqueue(Ptr<QueueDiscItem> item) override
    {
        if (IsCnp(item))
        {
            RdmaTag t;
            if (item->GetPacket()->PeekPacketTag(t))
            {
                (t.kind == RdmaTag::kNack ? m_nacks : m_acks)++;
            }
            else
            {
                m_cnps++;
            }
            bool ok = m_q[0]->Enqueue(item);
            NotePeak();
            return ok;
        }
        int32_t ingress = m_mmu ? m_mmu->curIngress : -1;
        int where = 0;
        double size = double(item->GetSize());
        if (m_mmu)
        {
            where = m_mmu->Admit(ingress, size);
            if (where < 0)
            {
                DropBeforeEnqueue(item, "switch buffer full");
                return false;
            }
        }
        if (m_ecn && !m_ecnAtDequeue)
        {
            MaybeMark(item, double(m_q[1]->GetNBytes()));
        }
        bool ok = m_q[1]->Enqueue(item);
        if (ok)
        {
            m_charge.emplace_back(ingress, where);
            NotePeak();
        }
        else if (m_mmu)
        {
            m_mmu->Release(ingress, size, where);
        }
        return ok;
    }

    Ptr<QueueDiscItem> DoDequeue() override
    {
        Ptr<QueueDiscItem> item = m_q[0]->Dequeue();
        if (item || m_paused)
        {
            if (item)
            {
                m_txBytes += item->GetSize();
            }
            return item;
        }
        item = m_q[1]->Dequeue();
        if (!item)
        {
            return item;
        }
        m_txBytes += item->GetSize();
        if (!m_charge.empty())
        {
            auto c = m_charge.front();
            m_charge.pop_front();
            if (m_mmu)
            {
                m_mmu->Release(c.first, double(item->GetSize()), c.second);
            }
        }
        uint32_t qlen = m_q[1]->GetNBytes();
        if (m_ecn && m_ecnAtDequeue)
        {
            MaybeMark(item, double(qlen));
        }
        if (!m_int)
        {
            return item;
        }
        Ptr<Packet> p = item->GetPacket();
        RdmaTag t;
        if (p->PeekPacketTag(t) && t.intOn && t.nhop < kMaxIntHops)
        {
            p->RemovePacketTag(t);
            IntHop& h = t.hop[t.nhop++];
            h.qlen = qlen;
            h.txBytes = m_txBytes;
            h.tsNs = uint64_t(Simulator::Now().GetNanoSeconds());
            h.bps = uint64_t(m_bps);
            p->AddPacketTag(t);
        }
        return item;
    }

    Ptr<const QueueDiscItem> DoPeek() override
    {
        Ptr<const QueueDiscItem> item = m_q[0]->Peek();
        if (item || m_paused)
        {
            return item;
        }
        return m_q[1]->Peek();
    }

    bool CheckConfig() override
    {
        if (GetNInternalQueues() == 0)
        {
            for (int k = 0; k < 2; k++)
            {
                Ptr<InternalQueue> q = CreateObject<DropTailQueue<QueueDiscItem>>();
                q->SetMaxSize(QueueSize(QueueSizeUnit::PACKETS, 100000000));
                AddInternalQueue(q);
            }
        }
        for (int k = 0; k < 2; k++)
        {
            m_q[k] = PeekPointer(GetInternalQueue(k)); // the base class keeps them alive
        }
        return true;
    }

    void InitializeParams() override
    {
    }
};

} // namespace tsim
