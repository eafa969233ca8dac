// trainsim ns-3 core, a loss recovery: go-back-N, as RoCE RC NICs do it (Params::reliable:
// HPCC, or a fabric with link error rates). Data carry their byte offset (RdmaTag::seq);
// the receiver takes them in order only, ACKs each, answers a gap with a NACK naming the
// byte it expects (at most once per nackInterval for the same byte) and drops what comes
// out of order; the sender rewinds to the NACKed byte and, after rto without an ACK, to
// the last ACKed byte (a lost last packet has no successor to reveal the gap).
//
// Units: seconds for times, bytes for sequence numbers.
#pragma once

#include "tsim_cc.h"

namespace tsim
{

class GoBackN : public LossRecovery
{
  public:
    // resend: the transport puts the queue pair back in its NIC's schedule (after a rewind).
    GoBackN(const Params& params, QpState& q, RdmaTotals& totals, std::function<void()> resend)
        : P(params),
          m_q(q),
          m_totals(totals),
          m_resend(std::move(resend))
    {
    }

    void Start(double now) override
    {
        m_lastProgress = now;
        m_rtoEvent = Simulator::Schedule(Seconds(P.rto), &GoBackN::CheckRto, this);
    }

    void OnSend(double now) override
    {
        if (m_q.sndNxt == m_q.sndUna)
        {
            m_lastProgress = now; // the timeout counts from the first packet in flight
        }
    }

    void OnAck(uint64_t seq, double now) override
    {
        if (seq > m_q.sndUna)
        {
            m_q.sndUna = std::min<uint64_t>(seq, m_q.bytes);
            m_lastProgress = now;
            if (m_q.sndNxt < m_q.sndUna)
            {
                m_q.sndNxt = m_q.sndUna;
            }
        }
    }

    void OnNack(uint64_t seq, double now) override
    {
        m_totals.nacksReceived++;
        if (seq > m_q.sndUna)
        {
            m_q.sndUna = std::min<uint64_t>(seq, m_q.bytes);
        }
        m_lastProgress = now;
        Rewind(seq);
    }

    RxVerdict OnData(uint64_t seq, uint64_t expected, double now) override
    {
        if (seq == expected)
        {
            return RxVerdict::kAccept;
        }
        if (seq < expected)
        {
            return RxVerdict::kDuplicate;
        }
        m_totals.oooDropped++;
        if (m_lastNackSeq != expected || now - m_lastNackTime >= P.nackInterval)
        {
            m_lastNackSeq = expected;
            m_lastNackTime = now;
            return RxVerdict::kNack;
        }
        return RxVerdict::kDrop;
    }

    void Stop() override
    {
        m_stopped = true;
        m_rtoEvent.Cancel();
    }

  private:
    // Send again from byte seq.
    void Rewind(uint64_t seq)
    {
        if (seq < m_q.sndNxt)
        {
            m_totals.retxBytes += m_q.sndNxt - seq;
            m_q.sndNxt = seq;
            m_resend();
        }
    }

    // Every rto (from the last progress): rewind to the last ACKed byte if nothing moved.
    void CheckRto()
    {
        if (m_stopped)
        {
            return;
        }
        double now = Simulator::Now().GetSeconds();
        if (m_q.sndNxt > m_q.sndUna && now - m_lastProgress >= P.rto - 1e-12)
        {
            m_totals.timeouts++;
            m_lastProgress = now;
            Rewind(m_q.sndUna);
        }
        if (m_q.sndNxt == m_q.sndUna)
        {
            m_lastProgress = now; // nothing in flight: nothing to time out
        }
        m_rtoEvent = Simulator::Schedule(CeilTime(m_lastProgress + P.rto - now), &GoBackN::CheckRto, this);
    }

    const Params& P;
    QpState& m_q;
    RdmaTotals& m_totals;
    std::function<void()> m_resend;
    // sender
    double m_lastProgress{0};                  // s: last ACK progress (or start of sending)
    bool m_stopped{false};                     // delivered: a pending check does nothing
    EventId m_rtoEvent;
    // receiver
    uint64_t m_lastNackSeq{~uint64_t(0)};
    double m_lastNackTime{-1};
};

} // namespace tsim
