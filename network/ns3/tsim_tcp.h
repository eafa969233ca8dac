// trainsim ns-3 core: the TCP transport (--transport dctcp). One ns-3 TCP
// DCTCP connection per flow, to port kTcpPort on the destination host: the sender keeps
// its socket's buffer full until the flow's bytes are handed over (flow sent), the
// receiver counts bytes until it has them all (flow delivered) and both ends close.
// SetTcpDefaults holds the ns-3 defaults that make TCP behave like a datacenter stack;
// they are set for every run, before the IP stack is installed.
//
// Units: seconds for ns-3 timers, bytes for sizes and buffers.
#pragma once

#include "tsim_common.h"
#include "tsim_fabric.h"

namespace tsim
{

inline void
SetTcpDefaults(const Params& P)
{
    Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TcpDctcp::GetTypeId()));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(P.mtu - 52));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(P.tcpBuffer));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(P.tcpBuffer));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
    Config::SetDefault("ns3::TcpSocket::ConnTimeout", TimeValue(MilliSeconds(5)));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(5)));
    // ns-3's 200 ms delayed-ACK timer stalls a DCTCP flow whose window fell to one
    // segment for 200 ms at a time; a datacenter stack acknowledges within microseconds.
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MicroSeconds(20)));
    // ns-3 starts the RTO at 1 s until the first RTT sample; a lost SYN-ACK would stall
    // a flow for a whole second of a millisecond-scale iteration.
    Config::SetDefault("ns3::RttEstimator::InitialEstimation", TimeValue(MilliSeconds(1)));
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MicroSeconds(10)));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(false));
    Config::SetDefault("ns3::TcpSocketBase::UseEcn", StringValue("On"));
    Config::SetDefault("ns3::TcpSocketBase::MaxSegLifetime", DoubleValue(1e-3));
}

class TcpTransport
{
  public:
    TcpTransport(Fabric& fabric, FlowRegistry& flows, FlowEvents& events)
        : m_fabric(fabric),
          m_flows(flows),
          m_events(events)
    {
    }

    Fabric& m_fabric;
    FlowRegistry& m_flows;
    FlowEvents& m_events;
    std::vector<Ptr<Socket>> listeners;                   // per host, on kTcpPort
    std::unordered_map<Socket*, int32_t> flowOfSender;    // sending socket -> flow
    std::unordered_map<int32_t, Ptr<Socket>> senderOfFlow; // flow -> sending socket
    std::unordered_map<Socket*, int32_t> flowOfReceiver;  // accepted socket -> flow
    std::unordered_map<int32_t, uint64_t> bytesQueued;    // flow -> bytes handed to its socket

    // Host h listens for connections.
    void StartHost(uint32_t h)
    {
        Ptr<Socket> l = Socket::CreateSocket(m_fabric.Host(h), TcpSocketFactory::GetTypeId());
        l->Bind(InetSocketAddress(Ipv4Address::GetAny(), kTcpPort));
        l->Listen();
        l->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                             MakeCallback(&TcpTransport::Accept, this));
        listeners.push_back(l);
    }

    // Connects flow id from source port `port`; data follow as the socket has room.
    void StartFlow(int32_t id, uint16_t port)
    {
        const Flow& f = m_flows[id];
        Ptr<Socket> s = Socket::CreateSocket(m_fabric.Host(f.src), TcpSocketFactory::GetTypeId());
        s->Bind(InetSocketAddress(Ipv4Address::GetAny(), port));
        s->SetSendCallback(MakeCallback(&TcpTransport::Fill, this));
        s->Connect(InetSocketAddress(Ipv4Address(kBaseAddr + f.dst), kTcpPort));
        flowOfSender[PeekPointer(s)] = id;
        senderOfFlow[id] = s;
    }

    // Sender: the socket has room; hand over as much of the flow as it takes.
    void Fill(Ptr<Socket> s, uint32_t avail)
    {
        auto it = flowOfSender.find(PeekPointer(s));
        if (it == flowOfSender.end())
        {
            return;
        }
        int32_t id = it->second;
        uint64_t sent = bytesQueued[id];
        uint64_t total = m_flows[id].bytes;
        while (sent < total && s->GetTxAvailable() > 0)
        {
            uint32_t n = uint32_t(std::min<uint64_t>(total - sent, s->GetTxAvailable()));
            int r = s->Send(Create<Packet>(n));
            if (r <= 0)
            {
                break;
            }
            sent += uint64_t(r);
        }
        bytesQueued[id] = sent;
        if (sent >= total)
        {
            m_events.FlowSent(id);
        }
    }

    // Receiver: a connection arrived; find its flow by the sender's address and port.
    void Accept(Ptr<Socket> s, const Address& from)
    {
        InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
        uint32_t srcHost = a.GetIpv4().Get() - kBaseAddr;
        int32_t id = m_flows.FindBySource(srcHost, a.GetPort());
        if (id < 0)
        {
            return;
        }
        flowOfReceiver[PeekPointer(s)] = id;
        s->SetRecvCallback(MakeCallback(&TcpTransport::Receive, this));
    }

    // Receiver: count the bytes; with the last one, close both ends and report delivery.
    void Receive(Ptr<Socket> s)
    {
        auto it = flowOfReceiver.find(PeekPointer(s));
        if (it == flowOfReceiver.end())
        {
            return;
        }
        int32_t id = it->second;
        Flow& f = m_flows[id];
        Ptr<Packet> p;
        while ((p = s->Recv()))
        {
            f.rcvd += p->GetSize();
        }
        if (f.rcvd >= f.bytes && f.finish < 0)
        {
            flowOfReceiver.erase(it);
            s->Close();
            auto si = senderOfFlow.find(id);
            if (si != senderOfFlow.end())
            {
                si->second->Close();
                flowOfSender.erase(PeekPointer(si->second));
                senderOfFlow.erase(si);
            }
            bytesQueued.erase(id);
            m_events.FlowDone(id);
        }
    }
};

} // namespace tsim
