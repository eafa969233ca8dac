// trainsim ns-3 core: what every other part shares. The ns-3 and standard headers, host
// addressing and port constants, the nanosecond rounding of delays, the ECMP hash, the
// RDMA header fields that switches and NICs both read (RdmaTag, with HPCC's INT hop
// records), one flow's record (Flow) and the interface through which the transports
// report a flow sent or delivered (FlowEvents). The parameters handed over from Python
// (Params) are in tsim_params.h.
//
// Units: seconds (double) for times, bits/s for link and NIC rates, bytes for sizes.
#pragma once

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include "tsim_params.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tsim
{
using namespace ns3;

static const uint32_t kBaseAddr = 0x0A000001; // host h has address 10.0.0.1 + h
static const uint16_t kRdmaPort = 4791;       // RoCEv2's UDP port, for the receivers
static const uint16_t kTcpPort = 5001;
static const uint32_t kNvSwitchEnd = 0xFFFFFFFFu; // fluid flows: the node's NVSwitch as an end (NVLS)
// CNPs travel in their own high-priority class (NVIDIA's default cnp_dscp 48, cnp_802p_prio
// 6): DSCP 48 in the TOS byte, not ECN-capable. Data is ECN-capable (ECT(0)) in class 3.
static const uint8_t kCnpTos = 48 << 2;
static const uint8_t kDataTos = 0x02;

// ns-3 keeps time in integer nanoseconds: delays are rounded UP to the next nanosecond so
// that an event never fires before the moment it waits for (rounding down would re-arm
// the same event at the same instant forever).
inline Time
CeilTime(double seconds)
{
    return NanoSeconds(int64_t(std::ceil(seconds * 1e9 - 1e-6)));
}

inline uint64_t
Mix64(uint64_t x)
{
    // splitmix64 finaliser: a cheap, well-spread hash for ECMP choices.
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

// Key of a flow's (source host, source port): how receivers recognise a flow's packets.
inline uint64_t
SourcePortKey(uint32_t host, uint16_t port)
{
    return (uint64_t(host) << 16) | port;
}

// What a switch egress port reports in a data packet's in-band telemetry (HPCC's INT).
struct IntHop
{
    uint32_t qlen{0};     // bytes in the port's data queue as the packet leaves
    uint64_t txBytes{0};  // bytes the port has sent, all classes
    uint64_t tsNs{0};     // when, ns
    uint64_t bps{0};      // the port's line rate
};

static const uint32_t kMaxIntHops = 5;

// The RDMA header fields the model needs, as an ns-3 packet tag: the packet sequence number
// (byte offset) of data packets, ACK/NACK kind and ACKed byte, and the INT hop records
// switches push onto data packets (copied back by the receiver onto its ACK).
class RdmaTag : public Tag
{
  public:
    enum Kind : uint8_t
    {
        kData = 0,
        kAck = 1,
        kNack = 2
    };

    uint8_t kind{kData};
    uint8_t intOn{0}; // switches append INT hops
    uint8_t nhop{0};
    uint64_t seq{0}; // data: byte offset of the payload; ACK/NACK: next byte expected
    IntHop hop[kMaxIntHops];

    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("tsim::RdmaTag").SetParent<Tag>().SetGroupName("Network");
        return tid;
    }

    TypeId GetInstanceTypeId() const override
    {
        return GetTypeId();
    }

    uint32_t GetSerializedSize() const override
    {
        return 3 + 8 + nhop * 28;
    }

    void Serialize(TagBuffer b) const override
    {
        b.WriteU8(kind);
        b.WriteU8(intOn);
        b.WriteU8(nhop);
        b.WriteU64(seq);
        for (uint32_t i = 0; i < nhop; i++)
        {
            b.WriteU32(hop[i].qlen);
            b.WriteU64(hop[i].txBytes);
            b.WriteU64(hop[i].tsNs);
            b.WriteU64(hop[i].bps);
        }
    }

    void Deserialize(TagBuffer b) override
    {
        kind = b.ReadU8();
        intOn = b.ReadU8();
        nhop = b.ReadU8();
        seq = b.ReadU64();
        for (uint32_t i = 0; i < nhop; i++)
        {
            hop[i].qlen = b.ReadU32();
            hop[i].txBytes = b.ReadU64();
            hop[i].tsNs = b.ReadU64();
            hop[i].bps = b.ReadU64();
        }
    }

    void Print(std::ostream& os) const override
    {
        os << "kind=" << int(kind) << " seq=" << seq << " nhop=" << int(nhop);
    }
};

// One point-to-point flow. Network flows run between ns-3 hosts; fluid (NVLink) flows
// between GPU ranks of one server, or a GPU and kNvSwitchEnd.
struct Flow
{
    uint32_t src{0}, dst{0};
    uint64_t bytes{0};
    int32_t transfer{-1}; // dense index of its collective in World's transfer tables
    int32_t pending{0};   // parents not yet finished
    std::vector<int32_t> children;     // start when this flow has been delivered
    std::vector<int32_t> sendChildren; // same connection, next chunk: start once this one is sent
    bool fluid{false};
    bool sent{false};
    double start{-1}, finish{-1}; // s; -1 until it happens
    uint64_t rcvd{0};             // bytes delivered so far (network flows)
    uint16_t srcPort{0};
};

// What a transport (or the fluid model) tells the flow bookkeeping about a flow.
class FlowEvents
{
  public:
    virtual ~FlowEvents() = default;
    // The sender has handed the flow's last byte to its NIC (RDMA) or socket (TCP).
    virtual void FlowSent(int32_t id) = 0;
    // The receiver has every byte.
    virtual void FlowDone(int32_t id) = 0;
};

// Every flow of the run by global id, and which flow a (source host, source port) belongs
// to while it is in flight. World fills it; the transports look flows up in it.
struct FlowRegistry
{
    std::vector<Flow> all;                              // global flow id -> flow
    std::unordered_map<uint64_t, int32_t> bySourcePort; // SourcePortKey -> flow id

    Flow& operator[](int32_t id)
    {
        return all[id];
    }

    const Flow& operator[](int32_t id) const
    {
        return all[id];
    }

    // The flow sending from (host, port), or -1 if none is in flight there.
    int32_t FindBySource(uint32_t host, uint16_t port) const
    {
        auto it = bySourcePort.find(SourcePortKey(host, port));
        return it == bySourcePort.end() ? -1 : it->second;
    }
};

} // namespace tsim
