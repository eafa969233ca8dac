// trainsim ns-3 core, a model: the point-to-point link device (LinkDevice) and the wire
// between two of them (LinkChannel). They do what ns-3's PointToPointNetDevice and
// PointToPointChannel do for this simulator, event for event (the same two events per
// packet and hop, scheduled in the same order at the same nanoseconds, and the same
// device queue with the same flow-control traces), with less work per packet:
//
// - no PPP header object: every frame on these links is IPv4 (no IPv6 stack is installed
//   and point-to-point devices need no ARP), so the 2 bytes PPP adds are counted where
//   they matter (serialisation time, the link's byte counter, a host queue's peak bytes)
//   instead of being serialised onto the packet at one end and parsed off at the other;
// - no copy of the packet per hop: PointToPointChannel hands the receiver a copy (so that
//   the sender's trace sinks keep what was sent) and the receiving device copies it again
//   for its own trace sinks; nothing here keeps a sent packet, so the one packet moves on;
// - no trace sources: the counters they fed (LinkStat's bytes, serialisation clock and
//   lost packets; a host queue's peak) are updated by direct calls;
// - a received frame goes straight to the node's IPv4 (SetIpv4), the one handler that the
//   node's and the traffic-control layer's handler lists would have found for it.
//
// What stays ns-3's: the device queue (a DropTailQueue, with ns-3's flow control attached
// on switch ports by the fabric builder, tsim_fabric.h), the receive error model (link
// error rates), IPv4 and everything above it.
//
// Units: bytes for sizes, nanoseconds (ns-3 Time) for delays.
#pragma once

#include "tsim_common.h"
#include "tsim_link.h"

namespace tsim
{

class LinkChannel;

// Something that hands packets to a host's device only while its queue is empty, and waits
// for the queue to drain otherwise (the RDMA NIC, RdmaNic: its scheduler and the device's
// transmit queue are one arbiter in a real NIC, so data never piles up behind the host's
// own CNPs, ACKs or NACKs in a queue that PFC does not stop).
struct DrainWaiter
{
    virtual void OnDeviceDrained() = 0;
    virtual ~DrainWaiter() = default;
};

class LinkDevice : public NetDevice
{
  public:
    // PPP's header: protocol field (2 bytes, address and control compressed away), as
    // PointToPointNetDevice's PppHeader serialises it.
    static const uint32_t kPppBytes = 2;

    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("tsim::LinkDevice").SetParent<NetDevice>().SetGroupName("PointToPoint");
        return tid;
    }

    // The direction this device sends on: its byte counter and serialisation clock (set by
    // the fabric builder; without it the device sends at m_bps as PointToPointNetDevice).
    LinkStat* m_txStat{nullptr};
    // Hosts: where the device queue's deepest (bytes, PPP included) is kept; the queue only
    // deepens on an enqueue. Null on switch ports (their queue disc keeps the peak).
    uint32_t* m_queuePeak{nullptr};
    // The direction arriving here: its count of packets the error model discarded.
    LinkStat* m_rxStat{nullptr};

    void SetDataRate(DataRate bps)
    {
        m_bps = bps;
    }

    // Packets waiting behind the one on the wire.
    uint32_t Waiting() const
    {
        return m_queue->GetNPackets();
    }

    // Calls w->OnDeviceDrained() once, when the last waiting packet goes onto the wire.
    void WaitForDrain(DrainWaiter* w)
    {
        m_drainWaiter = w;
    }

    void SetQueue(Ptr<Queue<Packet>> q)
    {
        m_queue = q;
    }

    Ptr<Queue<Packet>> GetQueue() const
    {
        return m_queue;
    }

    void SetReceiveErrorModel(Ptr<ErrorModel> em)
    {
        m_errorModel = em;
    }

    // Connects this device to its channel, whose wire takes `delay` (PointToPointNetDevice's
    // Attach; the device is up once attached). LinkChannel::Connect then tells each end
    // the other.
    void Attach(Ptr<LinkChannel> channel, Time delay);

    void SetPeer(LinkDevice* peer)
    {
        m_peer = peer;
        m_peerNode = peer->GetNode()->GetId();
        m_remote = peer->GetAddress();
    }

    // The other end: a packet sent here is received there after its serialisation and the
    // link's delay (PointToPointChannel::TransmitStart).
    void Receive(Ptr<Packet> p)
    {
        if (m_errorModel && m_errorModel->IsCorrupt(p))
        {
            if (m_rxStat)
            {
                m_rxStat->lost++;
            }
            return;
        }
        if (m_ipv4)
        {
            // what the node's receive path does with an IPv4 frame from this device, in one
            // call: Node::ReceiveFromDevice and TrafficControlLayer::Receive each scan a list
            // of two handlers per interface (IPv4 and ARP, 2 x a switch's radix) for the one
            // registered for this device and protocol, Ipv4L3Protocol::Receive
            m_ipv4->Receive(this, p, Ipv4L3Protocol::PROT_NUMBER, m_remote, m_self, NetDevice::PACKET_HOST);
            return;
        }
        m_rxCallback(this, p, Ipv4L3Protocol::PROT_NUMBER, m_remote);
    }

    // The node's IPv4, which has this device as an interface (Ipv4L3Protocol::AddInterface
    // registered its handlers for it): frames go to it directly. Only for nodes whose one
    // protocol on this device is IPv4 (ARP is never used on point-to-point links, and
    // nothing else, such as a packet socket or a promiscuous sniffer, is installed).
    void SetIpv4(Ptr<Ipv4L3Protocol> ipv4)
    {
        m_ipv4 = PeekPointer(ipv4); // the node keeps it alive
        m_self = GetAddress();
    }

    // ---- NetDevice ----
    bool Send(Ptr<Packet> packet, const Address&, uint16_t protocolNumber) override
    {
        NS_ABORT_MSG_IF(protocolNumber != Ipv4L3Protocol::PROT_NUMBER, "tsim::LinkDevice carries IPv4 only");
        if (!m_linkUp)
        {
            return false;
        }
        if (!m_queue->Enqueue(packet))
        {
            return false; // the queue's Drop trace has counted it
        }
        if (m_queuePeak)
        {
            uint32_t b = m_queue->GetNBytes() + kPppBytes * m_queue->GetNPackets();
            if (b > *m_queuePeak)
            {
                *m_queuePeak = b;
            }
        }
        if (!m_busy)
        {
            // enqueued and dequeued at once, as PointToPointNetDevice does (the queue's
            // traces, and so ns-3's flow control on switch ports, see both)
            return TransmitStart(m_queue->Dequeue());
        }
        return true;
    }

    bool SendFrom(Ptr<Packet>, const Address&, const Address&, uint16_t) override
    {
        return false;
    }

    void SetIfIndex(const uint32_t index) override
    {
        m_ifIndex = index;
    }

    uint32_t GetIfIndex() const override
    {
        return m_ifIndex;
    }

    Ptr<Channel> GetChannel() const override;

    void SetAddress(Address address) override
    {
        m_address = Mac48Address::ConvertFrom(address);
    }

    Address GetAddress() const override
    {
        return m_address;
    }

    bool SetMtu(const uint16_t mtu) override
    {
        m_mtu = mtu;
        return true;
    }

    uint16_t GetMtu() const override
    {
        return m_mtu;
    }

    bool IsLinkUp() const override
    {
        return m_linkUp;
    }

    void AddLinkChangeCallback(Callback<void> callback) override
    {
        m_linkChange.ConnectWithoutContext(callback);
    }

    bool IsBroadcast() const override
    {
        return true;
    }

    Address GetBroadcast() const override
    {
        return Mac48Address::GetBroadcast();
    }

    bool IsMulticast() const override
    {
        return true;
    }

    Address GetMulticast(Ipv4Address) const override
    {
        return Mac48Address("01:00:5e:00:00:00");
    }

    Address GetMulticast(Ipv6Address) const override
    {
        return Mac48Address("33:33:00:00:00:00");
    }

    bool IsBridge() const override
    {
        return false;
    }

    bool IsPointToPoint() const override
    {
        return true;
    }

    Ptr<Node> GetNode() const override
    {
        return m_node;
    }

    void SetNode(Ptr<Node> node) override
    {
        m_node = node;
    }

    bool NeedsArp() const override
    {
        return false;
    }

    void SetReceiveCallback(NetDevice::ReceiveCallback cb) override
    {
        m_rxCallback = cb;
    }

    void SetPromiscReceiveCallback(NetDevice::PromiscReceiveCallback cb) override
    {
        m_promiscCallback = cb; // kept, never called: nothing here listens promiscuously
    }

    bool SupportsSendFrom() const override
    {
        return false;
    }

  protected:
    void DoDispose() override
    {
        m_node = nullptr;
        m_channel = nullptr;
        m_queue = nullptr;
        m_errorModel = nullptr;
        m_peer = nullptr;
        m_ipv4 = nullptr;
        NetDevice::DoDispose();
    }

  private:
    // PointToPointNetDevice::TransmitStart: the transmit-complete event, then the far
    // end's receive (in this order: events at the same nanosecond run in the order they
    // were scheduled), both at the serialisation time of the frame, PPP included.
    bool TransmitStart(Ptr<Packet> p)
    {
        m_busy = true;
        uint32_t wire = p->GetSize() + kPppBytes;
        Time txTime = m_txStat ? m_txStat->OnTx(wire) : m_bps.CalculateBytesTxTime(wire);
        Simulator::Schedule(txTime, &LinkDevice::TransmitComplete, this);
        Simulator::ScheduleWithContext(m_peerNode, txTime + m_delay, &LinkDevice::Receive, m_peer, p);
        return true;
    }

    void TransmitComplete()
    {
        m_busy = false;
        Ptr<Packet> p = m_queue->Dequeue();
        if (p)
        {
            TransmitStart(p);
        }
        if (m_drainWaiter && m_queue->GetNPackets() == 0)
        {
            DrainWaiter* w = m_drainWaiter;
            m_drainWaiter = nullptr;
            w->OnDeviceDrained();
        }
    }

    Ptr<Node> m_node;
    Ptr<LinkChannel> m_channel;
    Ptr<Queue<Packet>> m_queue;
    Ptr<ErrorModel> m_errorModel;
    DrainWaiter* m_drainWaiter{nullptr}; // WaitForDrain
    LinkDevice* m_peer{nullptr}; // the channel's other device (kept alive by its node)
    uint32_t m_peerNode{0};      // its node's id: the context its receive events run in
    Address m_remote;            // its address (what the node's receive path is told)
    Address m_self;              // this device's address, as the node's receive path passes it on
    Ipv4L3Protocol* m_ipv4{nullptr}; // where received frames go (SetIpv4); null: the node's receive callback
    DataRate m_bps;
    Time m_delay;
    Mac48Address m_address;
    uint32_t m_ifIndex{0};
    uint16_t m_mtu{1500};
    bool m_linkUp{false};
    bool m_busy{false};
    TracedCallback<> m_linkChange;
    NetDevice::ReceiveCallback m_rxCallback;
    NetDevice::PromiscReceiveCallback m_promiscCallback;
};

// The wire: two devices (ns-3's Channel interface, for whoever asks a device for it).
class LinkChannel : public Channel
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("tsim::LinkChannel").SetParent<Channel>().SetGroupName("PointToPoint");
        return tid;
    }

    std::size_t GetNDevices() const override
    {
        return m_n;
    }

    Ptr<NetDevice> GetDevice(std::size_t i) const override
    {
        return m_dev[i];
    }

    void Add(Ptr<LinkDevice> dev)
    {
        NS_ABORT_MSG_IF(m_n >= 2, "tsim::LinkChannel: a link has two ends");
        m_dev[m_n++] = dev;
    }

    // Both ends attached: each learns the other.
    void Connect()
    {
        m_dev[0]->SetPeer(PeekPointer(m_dev[1]));
        m_dev[1]->SetPeer(PeekPointer(m_dev[0]));
    }

  protected:
    void DoDispose() override
    {
        m_dev[0] = nullptr;
        m_dev[1] = nullptr;
        Channel::DoDispose();
    }

  private:
    Ptr<LinkDevice> m_dev[2];
    std::size_t m_n{0};
};

inline void
LinkDevice::Attach(Ptr<LinkChannel> channel, Time delay)
{
    m_channel = channel;
    m_delay = delay;
    channel->Add(this);
    m_linkUp = true;
    m_linkChange();
}

inline Ptr<Channel>
LinkDevice::GetChannel() const
{
    return m_channel;
}

} // namespace tsim
