// trainsim ns-3 core, a congestion control: DCQCN (Zhu et al., SIGCOMM 2015, with NVIDIA
// ConnectX's timers), Params::cc == kCcDcqcn. The receiver (notification point) answers
// CE-marked packets with a CNP, at most one per flow per cnpInterval; the sender (reaction
// point) cuts Rc by alpha/2 at most once per rateDecreaseInterval, keeps alpha per
// alphaInterval period (up with a CNP in the period, down without; computed lazily, no
// event per period) and raises the rate by timer and byte counter (fast recovery,
// additive, hyper increase). It sets only the queue pair's rate: no window, no INT.
//
// Units: seconds for times, bits/s for rates (QpState::rc, rt), bytes for the byte counter.
#pragma once

#include "tsim_cc.h"

namespace tsim
{

class Dcqcn : public CongestionControl
{
  public:
    static CcTraits Traits(const Params&)
    {
        CcTraits t;
        t.cnpOnCe = true; // CNPs, no INT, and an ACK changes nothing (ACKs exist only on lossy links)
        return t;
    }

    // Starts at line rate (the transport has set q.rc = q.line), target rate the same.
    Dcqcn(const Params& params, QpState& q, RdmaTotals& totals)
        : P(params),
          m_q(q),
          m_totals(totals)
    {
        m_rt = q.line;
    }

    // Notification point: a CNP now unless this flow had one within cnpInterval.
    bool OnCeMarked(double now) override
    {
        if (m_lastCnpSent < 0 || now - m_lastCnpSent >= P.cnpInterval - 1e-12)
        {
            m_lastCnpSent = now;
            return true;
        }
        return false;
    }

    // Reaction point: a CNP. The first one starts alpha at 1 (ConnectX's
    // initial_alpha_value 1023/1024); a cut follows at once, or, within
    // rateDecreaseInterval of the last cut, when that interval ends.
    void OnCnp() override
    {
        double now = Simulator::Now().GetSeconds();
        if (m_alphaPeriodStart < 0)
        {
            m_alpha = 1.0;
            m_alphaPeriodStart = now;
            m_cnpInPeriod = false;
        }
        else
        {
            AdvanceAlpha(now);
            m_cnpInPeriod = true;
        }
        if (m_lastDecrease < 0 || now - m_lastDecrease >= P.rateDecreaseInterval - 1e-12)
        {
            Cut();
        }
        else if (!m_cutPending)
        {
            m_cutPending = true;
            m_cutEvent = Simulator::Schedule(CeilTime(m_lastDecrease + P.rateDecreaseInterval - now), &Dcqcn::Cut,
                                             this);
        }
    }

    // The NIC sent `bytes` of payload: every byteCounter bytes is a byte-counter stage
    // (none while at line rate).
    void OnSent(uint32_t bytes) override
    {
        if (m_q.rc >= m_q.line)
        {
            return;
        }
        m_bcBytes += bytes;
        if (m_bcBytes >= P.byteCounter)
        {
            m_bcBytes = 0;
            m_bcStage++;
            Increase();
        }
    }

    void Stop() override
    {
        m_stopped = true;
        m_cutEvent.Cancel();
        m_rateTimer.Cancel();
    }

  private:
    // DCQCN's alpha, brought up to `now`: every alphaInterval period ends with
    // alpha <- (1-g) alpha + g if a CNP arrived in it, (1-g) alpha if not (ConnectX's
    // dce_tcp_g / dce_tcp_rtt). Computed when needed instead of by a timer per period.
    void AdvanceAlpha(double now)
    {
        if (m_alphaPeriodStart < 0)
        {
            return;
        }
        double k = std::floor((now - m_alphaPeriodStart) / P.alphaInterval + 1e-9);
        if (k < 1)
        {
            return;
        }
        m_alphaPeriodStart += k * P.alphaInterval;
        if (m_cnpInPeriod)
        {
            m_alpha = (1 - P.g) * m_alpha + P.g;
            m_cnpInPeriod = false;
            k -= 1;
        }
        if (k > 0)
        {
            m_alpha *= std::pow(1 - P.g, k);
        }
    }

    // Rt <- Rc (with clampTargetRate, or if the timer has raised the rate since the last
    // cut: ConnectX's clamp_tgt_rate_after_time_inc), Rc <- Rc (1 - alpha/2), counters reset.
    void Cut()
    {
        if (m_stopped)
        {
            return;
        }
        double now = Simulator::Now().GetSeconds();
        AdvanceAlpha(now);
        m_totals.cuts++;
        m_cutPending = false;
        m_lastDecrease = now;
        if (P.clampTargetRate || m_timerIncSinceCut || m_rt >= m_q.line)
        {
            m_rt = m_q.rc;
        }
        m_q.rc = std::max(P.minRate, m_q.rc * (1 - m_alpha / 2));
        m_stage = 0;
        m_bcStage = 0;
        m_bcBytes = 0;
        m_timerIncSinceCut = false;
        m_rateTimer.Cancel();
        m_rateTimer = Simulator::Schedule(Seconds(P.rpTimer), &Dcqcn::RateIncrease, this);
    }

    // Every rpTimer after a cut, until the queue pair is back at line rate: a timer stage.
    void RateIncrease()
    {
        if (m_stopped)
        {
            return;
        }
        m_stage++;
        m_timerIncSinceCut = true;
        Increase();
        if (m_q.rc < m_q.line)
        {
            m_rateTimer = Simulator::Schedule(Seconds(P.rpTimer), &Dcqcn::RateIncrease, this);
        }
    }

    // One increase event (timer or byte counter): fast recovery while both counters are
    // below F, hyper increase once both exceed it, additive increase in between.
    void Increase()
    {
        int F = P.fastRecoveryTimes;
        int hi = std::max(m_stage, m_bcStage);
        int lo = std::min(m_stage, m_bcStage);
        if (hi < F)
        {
            // fast recovery: only Rc moves towards Rt
        }
        else if (lo > F)
        {
            m_rt = std::min(m_q.line, m_rt + (lo - F) * P.rateHai);
        }
        else
        {
            m_rt = std::min(m_q.line, m_rt + P.rateAi);
        }
        m_q.rc = std::min(m_q.line, (m_rt + m_q.rc) / 2);
    }

    const Params& P;
    QpState& m_q;
    RdmaTotals& m_totals;
    // notification point (the flow's receiver)
    double m_lastCnpSent{-1};      // s; -1 = never
    // reaction point
    double m_rt{0};                // target rate, bits/s
    double m_alpha{1.0};
    double m_alphaPeriodStart{-1}; // s: start of the current alpha period; -1 before the first CNP
    bool m_cnpInPeriod{false};     // a CNP arrived in the current alpha period
    double m_lastDecrease{-1};     // s; -1 = never
    bool m_cutPending{false};      // a CNP arrived too soon after the last cut: cut when allowed
    bool m_timerIncSinceCut{false};
    int m_stage{0};                // timer stages since the last cut (DCQCN's T)
    int m_bcStage{0};              // byte-counter stages since the last cut (DCQCN's BC)
    uint64_t m_bcBytes{0};         // bytes sent in the current byte-counter stage
    bool m_stopped{false};         // delivered: pending timers do nothing
    EventId m_cutEvent, m_rateTimer;
};

} // namespace tsim
