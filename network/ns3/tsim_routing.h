// trainsim ns-3 core, a model: routing. EcmpRouting is an IPv4 routing protocol that
// does per-flow ECMP on any topology: every node knows, per destination host, the
// interfaces on a shortest path (computed by BFS in Python, network/ns3/topology.py, and
// installed by Fabric::SetNextHopsBulk); a packet's choice among them is a hash of its
// 5-tuple (addresses, ports; the protocol is implied by the port) salted with the node
// id, as switches do it. Hosts send everything out of their one NIC and never forward.
//
// Units: none (addresses, interface indices, hashes).
#pragma once

#include "tsim_common.h"

namespace tsim
{

class EcmpRouting : public Ipv4RoutingProtocol
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("tsim::EcmpRouting")
                                .SetParent<Ipv4RoutingProtocol>()
                                .SetGroupName("Internet");
        return tid;
    }

    uint32_t m_salt{0};
    int32_t m_host{-1}; // host index for hosts, -1 for switches
    Ptr<Ipv4> m_ipv4;
    std::vector<std::vector<uint32_t>> m_next; // dst host -> interface indices
    std::vector<Ptr<Ipv4Route>> m_routes;      // per interface, reused
    uint32_t m_singleIf{0};                    // hosts with one NIC skip the table
    int32_t* m_ingressSlot{nullptr};           // switches: where the MMU reads a packet's ingress port

    Ptr<Ipv4Route> RouteFor(uint32_t iface, Ipv4Address src)
    {
        if (m_routes.size() <= iface)
        {
            m_routes.resize(iface + 1);
        }
        if (!m_routes[iface])
        {
            Ptr<Ipv4Route> r = Create<Ipv4Route>();
            r->SetGateway(Ipv4Address::GetZero());
            r->SetOutputDevice(m_ipv4->GetNetDevice(iface));
            r->SetSource(src);
            m_routes[iface] = r;
        }
        return m_routes[iface];
    }

    uint32_t Choose(uint32_t dstHost, uint64_t key) const
    {
        if (dstHost >= m_next.size() || m_next[dstHost].empty())
        {
            return 0;
        }
        const auto& v = m_next[dstHost];
        if (v.size() == 1)
        {
            return v[0];
        }
        return v[Mix64(key ^ (uint64_t(m_salt) << 40)) % v.size()];
    }

    static uint64_t FlowKey(Ptr<const Packet> p, const Ipv4Header& h)
    {
        uint8_t ports[4] = {0, 0, 0, 0};
        if (p && p->GetSize() >= 4)
        {
            p->CopyData(ports, 4); // UDP and TCP both start with src port, dst port
        }
        uint64_t k = (uint64_t(h.GetSource().Get()) << 32) | h.GetDestination().Get();
        k = Mix64(k) ^ (uint64_t(ports[0]) << 24 | uint64_t(ports[1]) << 16 |
                        uint64_t(ports[2]) << 8 | ports[3]);
        return k;
    }

    Ptr<Ipv4Route> RouteOutput(Ptr<Packet> p,
                               const Ipv4Header& header,
                               Ptr<NetDevice> oif,
                               Socket::SocketErrno& sockerr) override
    {
        if (m_host < 0)
        {
            sockerr = Socket::ERROR_NOROUTETOHOST;
            return nullptr;
        }
        uint32_t dst = header.GetDestination().Get() - kBaseAddr;
        uint32_t iface = m_singleIf;
        if (!m_next.empty())
        {
            iface = Choose(dst, FlowKey(p, header));
        }
        sockerr = Socket::ERROR_NOTERROR;
        return RouteFor(iface, Ipv4Address(kBaseAddr + uint32_t(m_host)));
    }

    bool RouteInput(Ptr<const Packet> p,
                    const Ipv4Header& header,
                    Ptr<const NetDevice> idev,
                    const UnicastForwardCallback& ucb,
                    const MulticastForwardCallback& mcb,
                    const LocalDeliverCallback& lcb,
                    const ErrorCallback& ecb) override
    {
        uint32_t dst = header.GetDestination().Get() - kBaseAddr;
        if (m_host >= 0)
        {
            if (dst == uint32_t(m_host))
            {
                lcb(p, header, idev->GetIfIndex()); // device i is interface i (see below)
                return true;
            }
            return false; // hosts never forward
        }
        if (dst >= m_next.size() || m_next[dst].empty())
        {
            return false;
        }
        uint32_t iface = Choose(dst, FlowKey(p, header));
        if (m_ingressSlot)
        {
            // forwarding enqueues into the egress queue disc within this call: the switch
            // MMU charges the packet to the port it came in on (device i is interface i)
            *m_ingressSlot = int32_t(idev->GetIfIndex());
        }
        ucb(RouteFor(iface, Ipv4Address::GetZero()), p, header);
        if (m_ingressSlot)
        {
            *m_ingressSlot = -1;
        }
        return true;
    }

    void NotifyInterfaceUp(uint32_t) override
    {
    }

    void NotifyInterfaceDown(uint32_t) override
    {
    }

    void NotifyAddAddress(uint32_t, Ipv4InterfaceAddress) override
    {
    }

    void NotifyRemoveAddress(uint32_t, Ipv4InterfaceAddress) override
    {
    }

    void SetIpv4(Ptr<Ipv4> ipv4) override
    {
        m_ipv4 = ipv4;
    }

    void PrintRoutingTable(Ptr<OutputStreamWrapper>, Time::Unit) const override
    {
    }
};

class EcmpRoutingHelper : public Ipv4RoutingHelper
{
  public:
    Ipv4RoutingHelper* Copy() const override
    {
        return new EcmpRoutingHelper(*this);
    }

    Ptr<Ipv4RoutingProtocol> Create(Ptr<Node>) const override
    {
        return CreateObject<EcmpRouting>();
    }
};

} // namespace tsim
