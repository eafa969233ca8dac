// trainsim ns-3 core, the interfaces of a queue pair's pluggable pieces. The RDMA transport
// (tsim_rdma.h) gives every queue pair one congestion control (DCQCN, tsim_dcqcn.h, or
// HPCC, tsim_hpcc.h) and, in the reliable mode, one loss recovery (go-back-N,
// tsim_gbn.h), as ns-3's TCP socket owns a TcpCongestionOps and a TcpRecoveryOps. The
// pieces share the queue pair's sending state (QpState, as ns-3's TcpSocketState); the
// transport keeps the sockets, the NIC scheduler and the packets, and calls the pieces at
// fixed points, so which piece runs never changes what happens when.
//
// A congestion control sees: CE marks at the receiver (its notification point, if it has
// one), CNPs, ACKs with the INT hop records switches stamped on the data packet, the bytes
// the NIC sends, and its own timers. It decides the queue pair's pacing rate (rc) and
// window (win, 0 = none), which the NIC obeys. A loss recovery sees ACKs, NACKs, the data
// packets the NIC sends and arrive at the receiver, and its own timeout; it decides
// where the sender resumes (sndNxt) and what the receiver answers.
//
// Units: seconds for times, bits/s for rates, bytes for sizes, windows and sequence numbers.
#pragma once

#include "tsim_common.h"

namespace tsim
{

// What a queue pair's pieces read and set. The transport fills line and bytes; the
// congestion control sets rc and win; the NIC advances sndNxt as it sends; the loss
// recovery moves sndUna on ACKs and NACKs and rewinds sndNxt to resend.
struct QpState
{
    double line{0};      // the NIC's line rate, bits/s
    double rc{0};        // the rate the NIC paces this queue pair at, bits/s
    double win{0};       // bytes allowed in flight; 0 = no window (DCQCN)
    uint64_t bytes{0};   // the flow's size
    uint64_t sndNxt{0};  // next byte to send (go-back-N rewinds it)
    uint64_t sndUna{0};  // bytes acknowledged (reliable mode)
};

// What the rest of the model must know about a run's congestion control, fixed for the
// run (each congestion control's static Traits(Params) says it).
struct CcTraits
{
    uint32_t intBytes{0};   // bytes of every data packet reserved for in-band telemetry
    bool intOn{false};      // data packets collect INT hop records, and ACKs return them
    bool cnpOnCe{false};    // the receiver answers CE-marked data packets (maybe) with a CNP
    bool kickOnAck{false};  // every ACK may change rate or window: the NIC looks again
};

// One queue pair's congestion control. Created when the flow starts (after the transport
// has set QpState's line, rc = line and bytes), dropped when it is delivered (Stop first).
class CongestionControl
{
  public:
    virtual ~CongestionControl() = default;

    // Receiver (notification point): a CE-marked data packet of this flow arrived at
    // `now`; true = send a CNP back now. Called only when CcTraits::cnpOnCe.
    virtual bool OnCeMarked(double /* now */)
    {
        return false;
    }

    // Sender (reaction point): a CNP arrived.
    virtual void OnCnp()
    {
    }

    // Sender: an ACK arrived (reliable mode), after the loss recovery has taken its
    // cumulative part; t holds the INT records the data packet collected.
    virtual void OnAck(const RdmaTag& /* t */)
    {
    }

    // Sender: the NIC has just sent `bytes` of payload.
    virtual void OnSent(uint32_t /* bytes */)
    {
    }

    // The flow is delivered: cancel timers; nothing is called after this.
    virtual void Stop()
    {
    }
};

// What a receiver does with a data packet in the reliable mode.
enum class RxVerdict
{
    kAccept,    // in order: count it, ACK the new cumulative byte
    kDuplicate, // already had it: ACK the cumulative byte again
    kNack,      // a gap: drop it, NACK the byte expected
    kDrop       // a gap already NACKed recently: drop it silently
};

// One queue pair's loss recovery (reliable mode only; the lossless fabric has none and the
// receiver just counts bytes). Sender and receiver halves of one flow live in one object:
// in the simulation both ends of a flow are known to the transport.
class LossRecovery
{
  public:
    virtual ~LossRecovery() = default;

    // The flow starts sending at `now` (arms the timeout).
    virtual void Start(double now) = 0;

    // Sender: the NIC is about to send a data packet from sndNxt at `now`.
    virtual void OnSend(double now) = 0;

    // Sender: an ACK says every byte below seq has arrived.
    virtual void OnAck(uint64_t seq, double now) = 0;

    // Sender: a NACK says the receiver expects byte seq next.
    virtual void OnNack(uint64_t seq, double now) = 0;

    // Receiver: a data packet from byte seq arrived while `expected` bytes have been taken.
    virtual RxVerdict OnData(uint64_t seq, uint64_t expected, double now) = 0;

    // The flow is delivered: cancel timers; nothing is called after this.
    virtual void Stop() = 0;
};

} // namespace tsim
