// trainsim ns-3 core, a model: the per-direction counters of a point-to-point link and its
// sub-nanosecond serialisation clock (LinkStat). The fabric builder (tsim_fabric.h) makes
// one per link direction and hands it to the link's devices (LinkDevice, tsim_device.h),
// which update it directly; the switch models (tsim_switch.h) write their peak queue into it.
//
// Units: bits/s for rates, nanoseconds for the carried remainder, bytes and packets for
// the counters.
#pragma once

#include "tsim_common.h"

namespace tsim
{

// Totals of one direction of one link: bytes on the wire, deepest egress queue, drops;
// and the link's sub-nanosecond serialisation clock.
//
// ns-3 keeps time in integer nanoseconds, so a device that turned each packet's bytes into
// a time at the link's rate would round it (9030 B take 98.15 ns at 736 Gb/s; a DataRate
// of the link's rate makes that 98 ns every time, and the NIC's pacing rounded up to
// 99 ns: +1% at 800 Gb/s, +4% at 2.88 Tb/s). OnTx, called by the sending device
// (LinkDevice, tsim_device.h) as a frame starts, returns the frame's time as the whole
// number of nanoseconds closest to the exact time plus the remainder carried from earlier
// frames, so that over any run of packets the link moves exactly bytes / rate (to within
// one nanosecond).
struct LinkStat
{
    uint64_t txBytes{0};
    uint32_t peakQueue{0};
    uint64_t drops{0};
    uint64_t lost{0};               // packets the receiving end discarded as corrupted (link error rate)
    double bps{0};                  // the link's real rate, bits/s
    double carryNs{0};              // exact minus granted serialisation time so far, ns

    // OnTx's last two (frame bytes, ns) -> frame time; size 0 never occurs (an empty slot)
    struct TxMemo
    {
        uint32_t size{0};
        int64_t n{0};
        Time t;
    };
    TxMemo memo[2];
    int memoNext{0};

    // A frame of `size` bytes on the wire (PPP included) starts: counts it and returns its
    // serialisation time.
    Time OnTx(uint32_t size)
    {
        txBytes += size;
        double exact = double(size) * 8e9 / bps + carryNs;
        double n = std::max(1.0, std::floor(exact + 0.5));
        carryNs = exact - n;
        // the time at the rate that makes size bytes take n ns, computed as ns-3's
        // PointToPointNetDevice computed it from that rate (DataRate's own rounding kept:
        // the same nanoseconds as before this device replaced it). A pure function of
        // (size, n), and a link sees few pairs (full frames alternate between two n), so
        // the last two are remembered: no 128-bit division per frame.
        int64_t ni = int64_t(n);
        for (auto& m : memo)
        {
            if (m.size == size && m.n == ni)
            {
                return m.t;
            }
        }
        Time t = DataRate(uint64_t(std::llround(double(size) * 8e9 / n))).CalculateBytesTxTime(size);
        memo[memoNext] = {size, ni, t};
        memoNext ^= 1;
        return t;
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

} // namespace tsim
