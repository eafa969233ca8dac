// trainsim ns-3 core, a model: the NVLink fluid model, for flows between GPUs of one
// server (and NVLS flows between a GPU and its NVSwitch), which never enter ns-3 unless
// --nvswitch. Each GPU has one egress and one ingress NVLink port of Params::nvlinkBps;
// the NVSwitch is non-blocking, so a flow's only constraints are its two ports (an
// NVSwitch end constrains nothing). Rates are max-min fair (progressive filling),
// recomputed whenever a flow of the server starts or ends; the server's next finish is an
// ns-3 event. World delays each flow by Params::nvlinkLatency before Add.
//
// Units: seconds for times; bits/s for Params::nvlinkBps, but bytes and bytes/s inside
// (remBytes, bytesPerS, port capacities).
#pragma once

#include "tsim_common.h"

namespace tsim
{

class NvlinkFluid
{
  public:
    NvlinkFluid(const Params& params, FlowRegistry& flows, FlowEvents& events)
        : P(params),
          m_flows(flows),
          m_events(events)
    {
    }

    // One active fluid flow.
    struct ActiveFlow
    {
        int32_t flow;
        double remBytes;  // bytes left at lastUpdate of its server
        double bytesPerS; // current max-min fair rate
    };

    const Params& P;
    FlowRegistry& m_flows;
    FlowEvents& m_events;
    uint32_t gpusPerNode{1};
    std::vector<std::vector<ActiveFlow>> serverFlows; // per server: its active fluid flows
    std::vector<double> lastUpdate;                   // per server: s, when remBytes were drained to
    std::vector<EventId> nextFinish;                  // per server: the pending Tick

    void Init(uint32_t servers, uint32_t gpn)
    {
        gpusPerNode = gpn;
        serverFlows.resize(servers);
        lastUpdate.assign(servers, 0.0);
        nextFinish.resize(servers);
    }

    // Drains every active flow of the server at its current rate up to now.
    void Advance(uint32_t server)
    {
        double now = Simulator::Now().GetSeconds();
        double dt = now - lastUpdate[server];
        lastUpdate[server] = now;
        for (auto& ff : serverFlows[server])
        {
            ff.remBytes -= ff.bytesPerS * dt;
        }
    }

    // Max-min fair rates by progressive filling: repeatedly the port with the smallest fair
    // share (remaining capacity / unfrozen flows through it) is the bottleneck, and its
    // flows are frozen at that share. Ports 0..gpn-1 are the GPUs' egress, gpn..2gpn-1
    // their ingress.
    void ShareRates(uint32_t server)
    {
        auto& v = serverFlows[server];
        uint32_t base = server * gpusPerNode; // rank of the server's first GPU
        std::vector<double> cap(2 * gpusPerNode, P.nvlinkBps / 8.0); // bytes/s left per port
        std::vector<int> users(2 * gpusPerNode, 0);                  // unfrozen flows per port
        std::vector<char> frozen(v.size(), 0);
        // Port index per flow end; an NVSwitch end (NVLS) constrains nothing: -1.
        std::vector<std::pair<int, int>> ports(v.size());
        for (size_t i = 0; i < v.size(); i++)
        {
            const Flow& f = m_flows[v[i].flow];
            int rs = f.src == kNvSwitchEnd ? -1 : int(f.src - base);
            int rd = f.dst == kNvSwitchEnd ? -1 : int(gpusPerNode + f.dst - base);
            ports[i] = {rs, rd};
            v[i].bytesPerS = 0;
            if (rs >= 0)
            {
                users[rs]++;
            }
            if (rd >= 0)
            {
                users[rd]++;
            }
        }
        size_t left = v.size();
        while (left > 0)
        {
            double share = 1e300;
            int bottleneck = -1;
            for (size_t r = 0; r < cap.size(); r++)
            {
                if (users[r] > 0 && cap[r] / users[r] < share)
                {
                    share = cap[r] / users[r];
                    bottleneck = int(r);
                }
            }
            if (bottleneck < 0)
            {
                // only switch-to-switch flows left (none in practice): full port rate
                for (size_t i = 0; i < v.size(); i++)
                {
                    if (!frozen[i])
                    {
                        v[i].bytesPerS = P.nvlinkBps / 8.0;
                    }
                }
                break;
            }
            for (size_t i = 0; i < v.size(); i++)
            {
                if (frozen[i])
                {
                    continue;
                }
                int rs = ports[i].first;
                int rd = ports[i].second;
                if (rs == bottleneck || rd == bottleneck)
                {
                    frozen[i] = 1;
                    left--;
                    v[i].bytesPerS = share;
                    for (int r : {rs, rd})
                    {
                        if (r >= 0)
                        {
                            cap[r] -= share;
                            users[r]--;
                        }
                    }
                }
            }
        }
    }

    // New rates, and the server's next finish as an ns-3 event.
    void Reschedule(uint32_t server)
    {
        ShareRates(server);
        nextFinish[server].Cancel();
        double best = 1e300;
        for (auto& ff : serverFlows[server])
        {
            if (ff.bytesPerS > 0)
            {
                best = std::min(best, std::max(0.0, ff.remBytes) / ff.bytesPerS);
            }
        }
        if (best < 1e300)
        {
            // Rounded up to the nanosecond, so the finishing flow really has 0 bytes left.
            nextFinish[server] = Simulator::Schedule(CeilTime(best), &NvlinkFluid::Tick, this, server);
        }
    }

    uint32_t ServerOf(const Flow& f) const
    {
        return (f.src != kNvSwitchEnd ? f.src : f.dst) / gpusPerNode;
    }

    // Flow id joins its server's flows (after its start-up latency).
    void Add(int32_t id)
    {
        uint32_t server = ServerOf(m_flows[id]);
        Advance(server);
        serverFlows[server].push_back({id, double(m_flows[id].bytes), 0.0});
        Reschedule(server);
    }

    // A flow of the server is due to finish: retire finished flows, re-share, report them.
    void Tick(uint32_t server)
    {
        Advance(server);
        std::vector<int32_t> done;
        auto& v = serverFlows[server];
        for (size_t i = 0; i < v.size();)
        {
            // within a byte (or a part per million) counts as done: float residue
            if (v[i].remBytes <= std::max(1.0, 1e-6 * double(m_flows[v[i].flow].bytes)))
            {
                done.push_back(v[i].flow);
                v[i] = v.back();
                v.pop_back();
            }
            else
            {
                i++;
            }
        }
        Reschedule(server);
        for (int32_t id : done)
        {
            m_events.FlowDone(id);
        }
    }

    // Bytes each active fluid flow still has to deliver at time `now` (s).
    void RemainingBytes(double now, std::unordered_map<int32_t, double>& out) const
    {
        for (size_t sv = 0; sv < serverFlows.size(); sv++)
        {
            for (const auto& ff : serverFlows[sv])
            {
                out[ff.flow] = ff.remBytes - ff.bytesPerS * (now - lastUpdate[sv]);
            }
        }
    }
};

} // namespace tsim
