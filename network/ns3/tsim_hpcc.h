// trainsim ns-3 core, a congestion control: HPCC (Li et al., SIGCOMM 2019), Params::cc ==
// kCcHpcc. Switches push INT hop records onto data packets (EcnQueueDisc, tsim_switch.h),
// the receiver returns them on a per-packet ACK, and the sender computes the bottleneck's
// normalised inflight U per ACK and sets its window W and rate W/T with the paper's
// multiplicative/additive rule (eta, maxStage, W_AI). HPCC always runs in the reliable
// mode (the transport sets it up; ACKs are its telemetry), and sends no CNPs.
//
// Units: seconds for times (T, the base RTT), bits/s for rates, bytes for windows.
#pragma once

#include "tsim_cc.h"

namespace tsim
{

class Hpcc : public CongestionControl
{
  public:
    static CcTraits Traits(const Params& P)
    {
        CcTraits t;
        t.intBytes = P.hpccIntBytes; // the INT header's share of every data packet
        t.intOn = true;
        t.kickOnAck = true;
        return t;
    }

    // Starts at line rate with one base RTT's worth of window: W = Wc = line x T.
    // baseRtt: the path's T (RdmaTransport::PathRtt).
    Hpcc(const Params& params, QpState& q, double baseRtt)
        : P(params),
          m_q(q),
          m_baseRtt(baseRtt)
    {
        m_q.win = m_wc = m_q.line * m_baseRtt / 8.0;
    }

    // Algorithm 1: per ACK, the normalised inflight of the most loaded hop,
    // U = qlen / (B T) + txRate / B, smoothed over a base RTT; the window is
    // Wc / (U / eta) + W_AI when U >= eta or after maxStage additive steps, else Wc + W_AI;
    // the reference window Wc moves once per RTT (ACKs past lastUpdateSeq).
    void OnAck(const RdmaTag& t) override
    {
        if (!m_haveInt)
        {
            m_haveInt = true;
            RememberHops(t);
            m_lastUpdateSeq = m_q.sndNxt;
            return;
        }
        bool update = t.seq > m_lastUpdateSeq;
        double T = m_baseRtt;
        double U = 0, tau = 0;
        bool any = false;
        uint32_t n = std::min<uint32_t>(t.nhop, m_nhop);
        for (uint32_t i = 0; i < n; i++)
        {
            const IntHop& h = t.hop[i];
            const IntHop& o = m_hop[i];
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
        RememberHops(t);
        if (any)
        {
            tau = std::min(tau, T);
            m_u = (1 - tau / T) * m_u + tau / T * U;
            double wmax = m_q.line * T / 8.0;
            double wmin = P.minRate * T / 8.0;
            double wai = P.hpccRateAiFraction * m_q.line * T / 8.0;
            double w;
            if (m_u >= P.hpccEta || m_incStage >= P.hpccMaxStage)
            {
                w = m_wc / std::max(m_u / P.hpccEta, 1e-9) + wai;
                if (update)
                {
                    m_incStage = 0;
                }
            }
            else
            {
                w = m_wc + wai;
                if (update)
                {
                    m_incStage++;
                }
            }
            w = std::max(wmin, std::min(wmax, w));
            if (update)
            {
                m_wc = w;
            }
            m_q.win = w;
            m_q.rc = w * 8.0 / T;
        }
        if (update)
        {
            m_lastUpdateSeq = m_q.sndNxt;
        }
    }

  private:
    // Keep this ACK's hop records: the next ACK's rates are measured against them.
    void RememberHops(const RdmaTag& t)
    {
        m_nhop = t.nhop;
        for (uint32_t i = 0; i < t.nhop; i++)
        {
            m_hop[i] = t.hop[i];
        }
    }

    const Params& P;
    QpState& m_q;
    double m_baseRtt{0};        // T, s
    double m_wc{0};             // reference window, bytes
    double m_u{0};              // EWMA of the bottleneck's normalised inflight
    int m_incStage{0};
    uint64_t m_lastUpdateSeq{0};
    bool m_haveInt{false};      // the first ACK only records the hops
    uint8_t m_nhop{0};
    IntHop m_hop[kMaxIntHops];  // the previous ACK's hop records
};

} // namespace tsim
