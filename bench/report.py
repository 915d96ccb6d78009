#!/usr/bin/env python3
"""Markdown tables for BENCHMARKS.md from the JSON files of bench/run.py.

    python3 bench/report.py bench/results/final-blast.json [more.json ...]

Each mode found in the files (rates, optimisations, saturation, pipeline) is
printed once, from the last file that holds it; the header names each file's
command, date and commit.
"""

import json
import sys

COMPONENTS = ["supervisor", "probe-loader", "span-actor", "exporter-actor"]


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def rates(res, args):
    s = res["summary"]
    rec = res["records"]
    out = [f"Open loop, load generator `{args['loadgen']}`, {args['duration']} s a point, {args['repeat']} off/on pairs, "
           "means of the pairs. `*` = the generator could not hold the rate.\n"]
    out.append(table(
        ["server", "req/s", "achieved on", "server µs/req off → on", "p50 ms off → on", "p99 ms off → on", "p99 added", "load gen µs/req"],
        [[x["server"], f"{x['rate']:,}", fmt(x["achieved_on"], ",.0f") + ("*" if x["saturated"] else ""),
          f"{fmt(x['srv_off'], '.1f')} → {fmt(x['srv_on'], '.1f')}", f"{fmt(x['p50_off'], '.3f')} → {fmt(x['p50_on'], '.3f')}",
          f"{fmt(x['p99_off'], '.3f')} → {fmt(x['p99_on'], '.3f')}", fmt(x["p99_added"] and 100 * x["p99_added"], "+.1f") + "%",
          fmt(x["load_us"], ".0f")] for x in s]))
    out.append("CPU of each ringtail process in ms per 1,000 requests (= µs a request), in-kernel probe time, spans per request:\n")
    out.append(table(
        ["server", "req/s", "supervisor", "probe-loader", "span-actor", "exporter-actor", "total", "in-kernel ns/req", "spans/req"],
        [[x["server"], f"{x['rate']:,}", *(fmt(x["rt_us_by_process"][c]) for c in COMPONENTS), f"**{fmt(x['rt_us'])}**",
          fmt(x["kernel_ns"], ",.0f"), fmt(x["spans_per_req"], ".4f")] for x in s]))
    on = [r for r in rec if r["ringtail"]]
    peak = {c: max((r["peak_rss_kb"].get(c, 0) for r in on), default=0) / 1024 for c in COMPONENTS}
    end = {c: max((r["memory_at_end"].get(c, {}).get("VmRSS", 0) for r in on), default=0) / 1024 for c in COMPONENTS}
    anon = {c: max((r["memory_at_end"].get(c, {}).get("RssAnon", 0) for r in on), default=0) / 1024 for c in COMPONENTS}
    # PSS as the load ended (runs of bench/run.py from before it was measured have none).
    pss = {c: max(((r.get("pss_kb") or {}).get(c) or 0 for r in on), default=0) / 1024 for c in COMPONENTS}
    ring = max((r["memory_at_end"].get("probe-loader", {}).get("bpf_map_mappings_kb", 0) for r in on), default=0) / 1024
    out.append(f"Memory, MB (highest over the points; the loader's RSS includes its mapping of the ring buffers, {ring:.1f} MB):\n")
    out.append(table(["", *COMPONENTS, "total"],
                     [["peak (VmHWM)", *(fmt(peak[c], ".1f") for c in COMPONENTS), fmt(sum(peak.values()), ".1f")],
                      ["at the end (VmRSS)", *(fmt(end[c], ".1f") for c in COMPONENTS), fmt(sum(end.values()), ".1f")],
                      ["of which anonymous", *(fmt(anon[c], ".1f") for c in COMPONENTS), fmt(sum(anon.values()), ".1f")],
                      ["PSS as the load ended", *(fmt(pss[c], ".1f") for c in COMPONENTS), fmt(sum(pss.values()), ".1f")]]))
    return "\n".join(out)


def optimisations(res, args):
    s = res["summary"]
    out = [f"{args['opt_server']} at {res.get('rate', args['opt_rate']):,} req/s, {args['duration']} s a point, {args['repeat']} repeats "
           "(order rotated). Ratio = variant / default.\n"]
    out.append(table(
        ["variant", "probe-loader µs/req", "span-actor", "exporter-actor", "total", "ratio", "in-kernel ns/req", "ratio", "wake-ups/req",
         "loader batches/req"],
        [[x["variant"], fmt(x["probe-loader"]), fmt(x["span-actor"]), fmt(x["exporter-actor"]), fmt(x["total"]),
          fmt(x["ratio_total"], ".2f") + "×", fmt(x["kernel_ns"], ",.0f"), fmt(x["ratio_kernel"], ".2f") + "×",
          fmt(x["wakeups_per_req"], ".4f"), fmt(x["loader_batches_per_req"], ".4f")] for x in s]))
    return "\n".join(out)


def saturation(res, args):
    s = res["summary"]
    out = [f"`wrk -t{args['wrk_threads']} -c{args['wrk_conns']} -d{args['sat_duration']}s`, {args['sat_repeat']} runs of each, order alternated.\n"]
    out.append(table(
        ["server", "req/s without", "req/s with", "with / without", "in-kernel ns/req", "runs without", "runs with"],
        [[x["server"], fmt(x["rps_off"], ",.0f"), fmt(x["rps_on"], ",.0f"), fmt(x["ratio"] and 100 * x["ratio"], ".1f") + "%",
          fmt(x.get("kernel_ns"), ",.0f"), " ".join(f"{v:,.0f}" for v in x["rps_off_all"]),
          " ".join(f"{v:,.0f}" for v in x["rps_on_all"])] for x in s]))
    w1 = [x for x in s if x.get("rps_wakeup1")]
    if w1:
        out.append("With `probe.wakeup_len = 1` (a wake-up per event):\n")
        out.append(table(["server", "req/s with wakeup_len 1", "vs without", "vs default", "in-kernel ns/req"],
                         [[x["server"], fmt(x["rps_wakeup1"], ",.0f"), fmt(100 * x["ratio_wakeup1"], ".1f") + "%",
                           fmt(x["rps_on"] and 100 * x["rps_wakeup1"] / x["rps_on"], ".1f") + "%", fmt(x.get("kernel_ns_wakeup1"), ",.0f")]
                          for x in w1]))
    return "\n".join(out)


def pipeline(res, args):
    rec = [r for r in res["records"] if r["ringtail"]]
    s = res["summary"]
    out = [f"`bench/goserver` raw server and the blast client ({args['blast_conns']} connections), sides traced: {args['pipeline_sides']}; "
           f"{args['pipeline_duration']} s a step, the last step flat out.\n"]
    rows = []
    for r in rec:
        # Older files divided by the nominal step length even when the
        # generator finished late; wall_s is the step's real length.
        if r["wall_s"] > 1.05 * args["pipeline_duration"]:
            r["span_rate"] = r["counters"]["spans_received"] / r["wall_s"]
            r["offered_span_rate"] = r["spans_expected"] / r["wall_s"]
        per = lambda c: r["ringtail_cpu_ns"][c] / 1000 / max(r["spans_expected"], 1)
        rows.append([fmt(r["offered_span_rate"], ",.0f"), fmt(r["span_rate"], ",.0f"), r["span_loss"], r["uncounted_loss"],
                     sum((r.get("drops") or {}).values()), *(fmt(per(c)) for c in ["probe-loader", "span-actor", "exporter-actor"]),
                     fmt(r.get("kernel_ns_per_req") and r["kernel_ns_per_req"] * r["requests"] / max(r["spans_expected"], 1), ",.0f")])
    out.append(table(["offered spans/s", "received spans/s", "lost", "uncounted", "drops", "probe-loader µs/span", "span-actor µs/span",
                      "exporter-actor µs/span", "in-kernel ns/span"], rows))
    ceil = s.get("one_core_ceiling_spans_s") or {}
    lossless = [r["span_rate"] for r in rec if r["lossless"]]
    lossy = [r["offered_span_rate"] for r in rec if not r["lossless"]]
    out.append(f"Highest lossless rate: **{fmt(max(lossless, default=None), ',.0f')} spans/s**; first loss at "
               f"{fmt(min(lossy, default=None), ',.0f')} spans/s offered"
               f"{' (none: the generator, sharing 2 cores with the server and ringtail, was the limit)' if not lossy else ''}. "
               "One-core ceilings (1 s / CPU a span): " + ", ".join(f"{c} {fmt(v, ',.0f')}" for c, v in ceil.items()) + " spans/s.\n")
    return "\n".join(out)


def main(paths):
    modes = {}
    for p in paths:
        d = json.load(open(p))
        print(f"- `{d['command']}` — {d['date']}, commit {d['commit']}, {d['profile']} binaries; "
              f"{d['machine']['cpu']}, {d['machine']['cores']} cores, {d['machine']['memory_mb'] // 1024} GiB, "
              f"{d['machine']['os']}, Linux {d['machine']['kernel']}; OTLP export {'on' if d['args'].get('otlp') else 'off'}")
        for m, res in d["results"].items():
            if m != "targets":
                modes[m] = (res, d["args"])
    print()
    for name, fn in [("rates", rates), ("optimisations", optimisations), ("saturation", saturation), ("pipeline", pipeline)]:
        if name in modes:
            print(f"### `{name}`\n")
            print(fn(*modes[name]))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
