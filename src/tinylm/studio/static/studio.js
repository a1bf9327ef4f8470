// tinylm studio's pages. Everything shown is fetched from the studio's JSON routes, which read the run
// folders; nothing is kept between visits, so a refresh shows what the folders say.
"use strict";
const studio = (() => {
  const params = new URLSearchParams(location.search);
  const token = params.get("token");
  const X_FIELDS = new Set(["step", "tokens", "elapsed_s", "train_s", "epoch"]);
  const COLORS = ["#2f6fde", "#e0552c", "#2a9d5b", "#9b4bd6", "#c28a00", "#d6336c", "#0d8a8a", "#666"];

  const withToken = (url) => token ? url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token) : url;
  document.querySelectorAll("a[data-keep-token]").forEach((a) => { a.href = withToken(a.getAttribute("href")); });

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) k === "class" ? (node.className = v) : node.setAttribute(k, v);
    for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(c ?? ""));
    return node;
  }

  function showError(message) {
    const box = document.getElementById("error");
    box.textContent = message;
    box.hidden = false;
  }

  // a stopped studio leaves an open page as it was: a banner says so while no request gets an answer
  const GONE = "the studio is not answering (stopped?)";
  const banner = el("div", { id: "gone", class: "gone", role: "alert", hidden: "" }, GONE);
  document.body.prepend(banner);
  const answering = (yes) => { banner.hidden = yes; };

  async function ask(url, options) {  // fetch; any HTTP answer says the studio is there, no answer that it is gone
    let reply;
    try { reply = await fetch(withToken(url), options); } catch (e) { answering(false); throw new Error(GONE); }
    answering(true);
    return reply;
  }

  async function postJSON(url, body) {
    const reply = await ask(url, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body) });
    const answer = await reply.json().catch(() => ({}));
    if (!reply.ok) throw new Error(answer.error ? answer.error.message : `${reply.status} ${reply.statusText}`);
    return answer;
  }

  async function getJSON(url) {
    const reply = await ask(url);
    const body = await reply.json().catch(() => ({}));
    if (!reply.ok) throw new Error(body.error ? body.error.message : `${reply.status} ${reply.statusText}`);
    return body;
  }

  const fmt = (v) => typeof v !== "number" ? String(v ?? "") : Math.abs(v) >= 1000 || Number.isInteger(v)
    ? v.toLocaleString("en-US") : v.toPrecision(4);
  const duration = (s) => s == null ? "" : s < 120 ? `${s.toFixed(1)} s` : `${(s / 60).toFixed(1)} min`;

  function sparkline([xs, ys]) {
    const w = 120, h = 28, svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
    svg.setAttribute("width", w); svg.setAttribute("height", h); svg.setAttribute("class", "spark");
    if (xs.length > 1) {
      const [x0, x1] = [xs[0], xs[xs.length - 1]], lo = Math.min(...ys), hi = Math.max(...ys);
      const pts = xs.map((x, i) => `${((x - x0) / (x1 - x0 || 1)) * (w - 2) + 1},${h - 1 - ((ys[i] - lo) / (hi - lo || 1)) * (h - 2)}`);
      const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
      line.setAttribute("points", pts.join(" ")); line.setAttribute("fill", "none"); line.setAttribute("stroke", COLORS[0]);
      svg.append(line);
    }
    return svg;
  }

  // ---- the runs page: a table refreshed from /api/runs, children listed under the run they started from
  async function runsPage() {
    const selected = new Set();
    const button = document.getElementById("compare");
    button.onclick = () => { location.href = withToken("/compare?" + [...selected].map((n) => "name=" + encodeURIComponent(n)).join("&")); };
    async function refresh() {
      let data;
      try { data = await getJSON("/api/runs"); } catch (e) { showError(e.message); return; }
      document.getElementById("error").hidden = true;
      document.getElementById("root").textContent = data.root;
      const byName = new Map(data.runs.map((r) => [r.name, r]));
      const depth = (r) => { let d = 0; for (let p = r.parent; p && byName.has(p) && d < 20; p = byName.get(p).parent) d++; return d; };
      const order = [];
      const visit = (r) => { order.push(r); data.runs.filter((c) => c.parent === r.name).forEach(visit); };
      data.runs.filter((r) => !r.parent || !byName.has(r.parent)).forEach(visit);
      const body = document.querySelector("#runs tbody");
      body.replaceChildren(...order.map((r) => {
        const box = el("input", { type: "checkbox" });
        box.checked = selected.has(r.name);
        box.onchange = () => { box.checked ? selected.add(r.name) : selected.delete(r.name); button.disabled = selected.size < 2; };
        const best = r.best ? `${r.best.name} ${fmt(r.best.value)} @${r.best.step}` : "";
        const link = el("a", { href: withToken("/run?name=" + encodeURIComponent(r.name)) }, r.name);
        const name = el("td", { style: `padding-left:${8 + 18 * depth(r)}px` }, depth(r) ? "\u2514 " : "", link);
        const status = el("span", { class: "status " + r.status, title: r.reason || "" }, r.status);
        return el("tr", { "data-run": r.name }, el("td", {}, box), name, el("td", {}, r.stage), el("td", {}, status),
          el("td", { class: "num" }, r.total_steps ? `${fmt(r.step)} / ${fmt(r.total_steps)}` : fmt(r.step)),
          el("td", {}, best), el("td", {}, sparkline(r.sparkline)), el("td", {}, r.started || ""),
          el("td", { class: "num" }, duration(r.duration_s)), el("td", {}, r.parent || ""));
      }));
    }
    await refresh();
    setInterval(refresh, 2000);
  }

  // ---- charts: one uPlot per metric, x by step / tokens / time, EMA smoothing, optional log y
  function smooth(ys, alpha) {
    if (!alpha) return ys;
    let last = null;
    return ys.map((y) => (y == null ? null : (last = last == null ? y : alpha * last + (1 - alpha) * y)));
  }

  function metricNames(rows) {
    const names = new Set();
    for (const r of rows) for (const [k, v] of Object.entries(r)) if (!X_FIELDS.has(k) && typeof v === "number") names.add(k);
    return [...names].sort((a, b) => (a === "loss" ? -1 : b === "loss" ? 1 : a.localeCompare(b)));
  }

  function series(rows, metric, x) {
    const pts = rows.filter((r) => typeof r[metric] === "number" && typeof r[x] === "number").map((r) => [r[x], r[metric]]);
    pts.sort((a, b) => a[0] - b[0]);
    return [pts.map((p) => p[0]), pts.map((p) => p[1])];
  }

  // The y range uPlot would choose, except for a series flat up to float noise (tis_weight 1.0, 0.99999994):
  // uPlot cannot split an axis that narrow (RangeError: Invalid array length), so it is drawn flat, centred.
  const yRange = (logy) => (u, lo, hi) => {
    if (lo == null || hi == null) return [null, null];
    const mid = (lo + hi) / 2, pad = Math.abs(mid) / 10 || 1;
    if (hi - lo > Math.abs(mid) * 1e-5) return logy ? uPlot.rangeLog(lo, hi, 10, false) : uPlot.rangeNum(lo, hi, 0.1, true);
    return logy ? [mid / 2, mid * 2] : [mid - pad, mid + pad];
  };

  let notesAsked = null;  // what each metric measures (/api/metric-notes), asked once per page
  const metricNotes = () => (notesAsked ??= getJSON("/api/metric-notes").then((a) => a.notes, () => ({})));

  // One chart per metric, each drawn the width of its own grid cell (the grid has 1 to 4 columns as the window
  // is narrow or wide) and redrawn when the cell's width changes.
  const CHART_HEIGHT = 220;
  class Charts {
    constructor(box, notes) {
      this.box = box; this.notes = notes; this.plots = new Map();
      let pending = null;  // a window dragged wider fires many resizes: refit once it rests
      this.cells = new ResizeObserver(() => { clearTimeout(pending); pending = setTimeout(() => this.fit(), 80); });
    }
    fit() {
      for (const { area, uplot } of this.plots.values()) {
        const width = Math.floor(area.clientWidth);
        if (width > 0 && width !== uplot.width) uplot.setSize({ width, height: CHART_HEIGHT });
      }
    }
    title(metric) {  // the name, its unit, and a line on what it measures (the whole note on hover too)
      const note = this.notes[metric];
      if (!note) return [el("h3", { title: "" }, metric)];
      const unit = note.unit ? ` (${note.unit})` : "";
      return [el("h3", { title: `${metric}${unit}: ${note.meaning}` }, metric, el("span", { class: "unit" }, unit)),
        el("p", { class: "note" }, note.meaning)];
    }
    draw(tables, labels, x, alpha, logy) {  // tables: run -> rows
      const metrics = [...new Set(Object.values(tables).flatMap(metricNames))];
      for (const metric of metrics) {
        const per = labels.map((l) => series(tables[l], metric, x));
        const joined = uPlot.join(per.map(([xs, ys]) => [xs, smooth(ys, alpha)]));
        const key = metric + "|" + logy + "|" + labels.length;
        let plot = this.plots.get(metric);
        if (plot && plot.key !== key) { this.cells.unobserve(plot.area); plot.uplot.destroy(); plot.node.remove(); plot = null; }
        if (!plot) {
          const area = el("div", { class: "plot" });
          const node = el("div", { class: "chart", "data-metric": metric }, ...this.title(metric), area);
          this.box.append(node);
          const tick = (u, values) => values.map((v) => v == null ? "" : Math.abs(v) >= 1e4 ? v.toExponential(1) : +v.toPrecision(3));
          const opts = { width: Math.max(100, Math.floor(area.clientWidth)), height: CHART_HEIGHT,
            scales: { x: { time: false }, y: { distr: logy ? 3 : 1, range: yRange(logy) } }, axes: [{}, { size: 64, values: tick }],
            series: [{ label: x }, ...labels.map((l, i) => ({ label: l, stroke: COLORS[i % COLORS.length], spanGaps: true }))],
            legend: { show: labels.length > 1 } };
          plot = { node, area, key, uplot: new uPlot(opts, joined, area) };
          this.plots.set(metric, plot);
          this.cells.observe(area);
        } else {
          plot.uplot.setData(joined);
        }
        plot.node.dataset.points = String(per.reduce((n, [xs]) => n + xs.length, 0));
      }
    }
  }

  function controls(redraw) {  // the chart controls, the same on every page with charts
    const select = el("select", { id: "x" }, ...[["step", "step"], ["tokens", "tokens"], ["elapsed_s", "time (s)"]]
      .map(([value, label]) => el("option", { value }, label)));
    const slider = el("input", { id: "smooth", type: "range", min: "0", max: "0.99", step: "0.01", value: "0" });
    document.getElementById("controls").prepend(el("label", {}, "x ", select), el("label", {}, "smoothing ", slider),
      el("label", {}, el("input", { id: "logy", type: "checkbox" }), " log y"));
    for (const id of ["x", "smooth", "logy"]) document.getElementById(id).oninput = redraw;
    return () => [document.getElementById("x").value, Number(document.getElementById("smooth").value),
      document.getElementById("logy").checked];
  }

  // ---- one run: its rows, then what it appends, pushed by /api/events from the byte offset reached
  async function runPage() {
    const name = params.get("name");
    document.getElementById("title").textContent = name;
    document.getElementById("inside-link").href = withToken(`/inside?name=${encodeURIComponent(name)}`);
    let rows = [], damaged = [];
    const charts = new Charts(document.getElementById("charts"), await metricNotes());
    const read = controls(() => draw());
    const draw = () => {
      charts.draw({ [name]: rows }, [name], ...read());
      document.getElementById("rows").textContent = `${rows.length} rows`;
      const note = document.getElementById("damaged");  // rows the reader skipped, named by line
      note.hidden = !damaged.length;
      note.textContent = `skipped ${damaged.length} damaged row${damaged.length > 1 ? "s" : ""} of metrics.jsonl: `
        + damaged.slice(0, 5).join(", ") + (damaged.length > 5 ? `, and ${damaged.length - 5} more` : "");
    };
    const showStatus = (s) => {
      const state = document.getElementById("state");
      state.replaceChildren(el("span", { class: "status " + (s.status || ""), id: "status" }, s.status || "no status"), " ", s.reason || "");
      document.getElementById("stop").hidden = s.status !== "running";
      document.getElementById("resume").hidden = !["stopped", "interrupted", "failed", "died"].includes(s.status);
    };
    const act = (what) => async () => {
      try { await postJSON("/api/" + what, { name }); } catch (e) { showError(e.message); }
    };
    document.getElementById("stop").onclick = act("stop");
    document.getElementById("resume").onclick = act("resume");
    const tail = async () => {
      try { document.getElementById("console").textContent = (await getJSON("/api/console?name=" + encodeURIComponent(name))).text; } catch (e) { /* no console */ }
    };
    tail();
    setInterval(tail, 2000);
    let info;
    try { info = await getJSON("/api/run?name=" + encodeURIComponent(name)); } catch (e) { showError(e.message); return; }
    showStatus({ status: info.status, reason: info.reason });
    const config = Object.entries(info.config || {}).filter(([k]) => k !== "model" && k !== "train");
    const table = document.querySelector("#config tbody");
    for (const section of ["model", "train"]) for (const [k, v] of Object.entries((info.config || {})[section] || {}))
      table.append(el("tr", {}, el("td", {}, `${section}.${k}`), el("td", {}, JSON.stringify(v))));
    for (const [k, v] of config) table.append(el("tr", {}, el("td", {}, k), el("td", {}, JSON.stringify(v))));
    document.getElementById("checkpoints").replaceChildren(...info.checkpoints.map((c) => el("li", {}, c)));
    const extras = runExtras(name);
    await extras.refresh();
    const first = await getJSON("/api/metrics?name=" + encodeURIComponent(name));
    rows = first.rows;
    damaged = first.damaged;
    draw();
    // the stream follows from the byte offset reached; a hidden tab closes it (a browser keeps only ~6
    // connections to one host, so open tabs would starve each other) and reopens it where it stopped
    let reached = { offset: first.offset, line: first.first_line }, live = null;
    const follow = () => {
      live = new EventSource(withToken(`/api/events?name=${encodeURIComponent(name)}&offset=${reached.offset}&line=${reached.line}`));
      live.onmessage = (event) => {
        const update = JSON.parse(event.data);
        rows = update.reset ? update.rows : rows.concat(update.rows);
        damaged = update.reset ? update.damaged : damaged.concat(update.damaged);
        reached = { offset: update.offset, line: update.first_line };
        if (update.status) showStatus({ ...update.status, status: update.state || update.status.status });
        draw();
        if (update.reset || update.rows.some((r) => !("loss" in r)) || update.state !== "running") extras.refresh();
      };
      // the browser's own reconnect would ask again from the first offset and append rows twice: reopen from
      // the offset reached instead (a studio restart, a network blip)
      live.onopen = () => answering(true);
      live.onerror = () => {
        live.close();
        live = null;
        ask("/favicon.ico", { cache: "no-store" }).catch(() => {});  // a studio gone, or only this stream?
        setTimeout(() => { if (!live && !document.hidden) follow(); }, 1000);
      };
    };
    document.addEventListener("visibilitychange", () => {
      if (document.hidden && live) { live.close(); live = null; } else if (!document.hidden && !live) follow();
    });
    follow();
  }

  // the run page's samples (replies by step), evaluations and report card, read again after each evaluation
  function runExtras(name) {
    const query = "?name=" + encodeURIComponent(name);
    const stepSelect = document.getElementById("sample-step");
    let samples = { steps: [], samples: {} };
    const showSamples = () => {
      const rows = samples.samples[stepSelect.value] || [];
      document.querySelector("#samples tbody").replaceChildren(...rows.map((s) => el("tr", {},
        el("td", {}, el("pre", {}, s.prompt ?? "")), el("td", {}, el("pre", {}, s.reply)),
        el("td", {}, s.verified === undefined ? "" : s.verified ? "yes" : "no"))));
      document.getElementById("sample-note").textContent = samples.steps.length ? "" : "no samples yet (they are written at each evaluation)";
    };
    stepSelect.onchange = showSamples;
    const link = document.getElementById("report-link");
    document.getElementById("build-report").onclick = async () => {
      document.getElementById("report-note").textContent = "building...";
      try {
        const built = await postJSON("/api/report", { name });  // its answer says the card exists now
        document.getElementById("report-note").textContent = "built";
        link.hidden = !built.report;
        link.href = withToken("/api/report" + query);
      } catch (e) { document.getElementById("report-note").textContent = e.message; }
    };
    const refresh = async () => {
      try {
        samples = await getJSON("/api/samples" + query);
        const chosen = stepSelect.value, newest = String(samples.steps.at(-1) ?? "");
        const following = !chosen || chosen === stepSelect.dataset.newest;  // a reader on the newest step stays on it
        stepSelect.replaceChildren(...samples.steps.map((s) => el("option", { value: String(s) }, String(s))));
        stepSelect.value = following ? newest : chosen;
        stepSelect.dataset.newest = newest;
        showSamples();
        const { evaluations: evals, report } = await getJSON("/api/evaluations" + query);
        document.querySelector("#evaluations tbody").replaceChildren(...evals.flatMap((e) =>
          Object.entries(e.scores).map(([task, scores]) => el("tr", {}, el("td", {}, `step ${e.step}`), el("td", {}, task),
            el("td", {}, Object.entries(scores).map(([k, v]) => `${k} ${typeof v === "number" ? v.toFixed(4) : v}`).join(", "))))));
        if (!evals.length) document.querySelector("#evaluations tbody").replaceChildren(el("tr", {}, el("td", {}, "no tinylm eval of this run yet")));
        link.hidden = !report;
        link.href = withToken("/api/report" + query);
      } catch (e) { showError(e.message); }
    };
    return { refresh };
  }

  // ---- compare: every metric overlaid, and the config fields that differ
  async function comparePage() {
    const names = params.getAll("name");
    document.getElementById("names").textContent = names.join(" vs ");
    let data;
    try { data = await getJSON("/api/compare?" + names.map((n) => "name=" + encodeURIComponent(n)).join("&")); } catch (e) { showError(e.message); return; }
    document.querySelector("#diff thead").replaceChildren(el("tr", {}, el("th", {}, "field"), ...data.runs.map((n) => el("th", {}, n))));
    document.querySelector("#diff tbody").replaceChildren(...Object.entries(data.differences).map(([field, values]) =>
      el("tr", { "data-field": field }, el("td", {}, field), ...data.runs.map((n) => n in values
        ? el("td", {}, JSON.stringify(values[n])) : el("td", { class: "absent", title: "not in this run's config" }, "\u2014")))));
    const charts = new Charts(document.getElementById("charts"), await metricNotes());
    const read = controls(() => charts.draw(data.rows, data.runs, ...read()));
    charts.draw(data.rows, data.runs, ...read());
  }

  // ---- launch: a form per stage, generated from the stage table's option fields (/api/stages)
  const negated = (field) => field.kind === "bool" && field.flag.startsWith("--no-");  // a flag that turns it off

  async function launchPage() {
    let forms;
    try { forms = (await getJSON("/api/stages")).stages; } catch (e) { showError(e.message); return; }
    const stage = document.getElementById("stage");
    stage.replaceChildren(...forms.map((f) => el("option", { value: f.stage }, `${f.stage} (tinylm ${f.command})`)));
    const current = () => forms.find((f) => f.stage === stage.value);
    const values = () => {
      const out = {};
      for (const input of document.querySelectorAll("#form [data-field]")) {
        const field = current().fields.find((f) => f.name === input.dataset.field);
        // a box labelled --no-X is the flag: checked = given = the option off
        const raw = input.type === "checkbox" ? input.checked !== negated(field) : input.value.trim();
        const dflt = field.default ?? (field.kind === "bool" ? false : "");
        if (input.type === "checkbox" ? raw === dflt : raw === String(dflt)) continue;  // unchanged: the default
        out[field.name] = field.items ? raw.split(/\s+/).filter(Boolean) : raw;
      }
      return out;
    };
    const processes = () => Number(document.getElementById("processes").value);
    let asked = 0;  // answers can arrive out of order while typing: only the latest question's is shown
    const preview = async () => {
      const mine = ++asked;
      try {
        const answer = await postJSON("/api/preview", { stage: stage.value, name: document.getElementById("name").value,
          options: values(), processes: processes() });
        if (mine !== asked) return;
        document.getElementById("error").hidden = true;
        document.getElementById("preview").textContent = answer.argv.join(" ");
      } catch (e) { if (mine === asked) showError(e.message); }
    };
    const render = () => {
      const form = current();
      document.getElementById("stage-help").textContent = form.help;
      const groups = new Map();
      for (const field of form.fields) {
        const input = field.kind === "bool" ? el("input", { type: "checkbox" })
          : field.choices ? el("select", {}, ...(field.optional ? [el("option", { value: "" }, "")] : []), ...field.choices.map((c) => el("option", { value: c }, c)))
          : el("input", { type: field.kind === "int" || field.kind === "float" ? "number" : "text", step: "any" });
        input.dataset.field = field.name;
        input.id = "field-" + field.name;
        if (field.kind === "bool") input.checked = !!field.default !== negated(field);
        else input.value = field.items ? "" : (field.default ?? "");
        input.oninput = preview;
        const range = [field.low != null ? `>= ${field.low}` : "", field.high != null ? `<= ${field.high}` : ""].filter(Boolean).join(", ");
        const row = el("div", { class: "field" }, el("label", { for: input.id }, field.flag + (field.required ? " *" : "")), input,
          el("small", {}, field.help + (range ? ` (${range})` : "")));
        const group = field.group || "options";
        if (!groups.has(group)) groups.set(group, el("fieldset", {}, el("legend", {}, group)));
        groups.get(group).append(row);
      }
      document.getElementById("form").replaceChildren(...groups.values());
      preview();
    };
    stage.onchange = render;
    document.getElementById("name").oninput = preview;
    document.getElementById("processes").oninput = preview;
    document.getElementById("launch").onclick = async () => {
      const name = document.getElementById("name").value;
      try {
        await postJSON("/api/launch", { stage: stage.value, name, options: values(), processes: processes() });
        location.href = withToken("/run?name=" + encodeURIComponent(name));
      } catch (e) { showError(e.message); }
    };
    render();
  }

  // ---- the tokenizer playground: text -> colored tokens, the id on hover, for any run's tokenizer
  async function tokensPage() {
    let runs;
    try { runs = (await getJSON("/api/runs")).runs.filter((r) => r.checkpoints.length); } catch (e) { showError(e.message); return; }
    const select = document.getElementById("run");
    select.replaceChildren(...runs.map((r) => el("option", { value: r.name }, r.name)));
    if (params.get("name")) select.value = params.get("name");
    let asked = 0;  // answers can arrive out of order while typing: only the latest question's is shown
    const show = async () => {
      const mine = ++asked;
      document.getElementById("error").hidden = true;
      const text = document.getElementById("text").value;
      let answer;
      try { answer = await getJSON(`/api/tokenize?name=${encodeURIComponent(select.value)}&text=${encodeURIComponent(text)}`); }
      catch (e) { if (mine === asked) showError(e.message); return; }
      if (mine !== asked) return;
      document.getElementById("count").textContent = `${answer.ids.length} tokens (${answer.tokenizer})`;
      document.getElementById("tokens").replaceChildren(...answer.tokens.map(tokenSpan));
    };
    select.onchange = show;
    document.getElementById("text").oninput = show;
    show();
  }

  // one token: its text, its id and bytes on hover; with a loss mask, learned tokens in green shades and the
  // rest in grey (two shades each, alternating, so neighbouring tokens stay apart)
  function tokenSpan(t, i) {
    const masked = t.learn !== undefined;
    const background = !masked ? `hsl(${(i * 67) % 360} 70% 88%)` : t.learn ? `hsl(135 55% ${i % 2 ? 78 : 86}%)`
      : `hsl(220 10% ${i % 2 ? 86 : 92}%)`;
    const cls = "token" + (t.special ? " special" : "") + (masked ? (t.learn ? " learn" : " context") : "");
    return el("span", { class: cls, title: `id ${t.id}, bytes ${t.bytes}` + (masked ? (t.learn ? ", in the loss" : ", not in the loss") : ""),
      "data-id": String(t.id), style: `background:${background}` }, t.text);
  }

  // ---- data: the rows a stage would train on from a data spec, token by token, the loss mask shown
  async function dataPage() {
    let forms, runs;
    try {
      forms = (await getJSON("/api/stages")).stages;
      runs = (await getJSON("/api/runs")).runs.filter((r) => r.checkpoints.length);
    } catch (e) { showError(e.message); return; }
    const stage = document.getElementById("stage"), run = document.getElementById("run");
    stage.replaceChildren(...forms.map((f) => el("option", { value: f.stage }, f.stage)));
    stage.value = params.get("stage") || "sft";
    run.replaceChildren(el("option", { value: "" }, "(none)"), ...runs.map((r) => el("option", { value: r.name }, r.name)));
    if (params.get("run")) run.value = params.get("run");
    else if (runs.length) run.value = runs[0].name;
    if (params.get("data")) document.getElementById("spec").value = params.get("data");
    let asked = 0;  // only the latest question's answer is shown
    const show = async () => {
      const mine = ++asked;
      const query = new URLSearchParams({ stage: stage.value, data: document.getElementById("spec").value.trim(),
        limit: document.getElementById("limit").value });
      if (run.value) query.set("run", run.value);
      let answer;
      try { answer = await getJSON("/api/data?" + query); }
      catch (e) {
        if (mine !== asked) return;
        showError(e.message);
        document.getElementById("rows").replaceChildren();
        return;
      }
      if (mine !== asked) return;
      document.getElementById("error").hidden = true;
      document.getElementById("notes").replaceChildren(...answer.notes.map((n) => el("li", {}, n)));
      document.getElementById("rows").replaceChildren(...answer.rows.map((row) => el("div", { class: "row", "data-label": row.label },
        el("h3", {}, `${row.label}: ${row.n_tokens} tokens, ${row.n_learn} in the loss` + (row.answer !== undefined ? `; reference answer ${JSON.stringify(row.answer)}` : "")),
        el("p", { class: "tokens" }, ...row.tokens.map(tokenSpan)))));
    };
    stage.onchange = show;
    run.onchange = show;
    document.getElementById("limit").onchange = show;
    document.getElementById("preview").onclick = show;
    document.getElementById("spec").onkeydown = (e) => { if (e.key === "Enter") show(); };
    show();
  }

  // ---- chat: one conversation, sent whole to one checkpoint or to two side by side (/api/chat, streamed)
  // A reply's pieces as they stream: reasoning apart from the answer, and each round of the built-in
  // tools the server runs (tool_messages: the call, then the result), kept to send with the next turn.
  const callText = (call) => `→ ${call.function.name} ${call.function.arguments}`;
  function readDelta(reply, delta) {
    reply.reasoning += delta.reasoning_content || "";
    for (const message of delta.tool_messages || []) {  // a round the server ran: what it wrote, then the calls
      if (reply.reasoning) reply.parts.push({ kind: "reasoning", text: reply.reasoning });
      if (reply.text) reply.parts.push({ kind: "said", text: reply.text });
      reply.reasoning = reply.text = "";
      reply.rounds.push(message);
      if (message.role === "tool") reply.parts.push({ kind: "tool-result", text: "← " + message.content });
      else (message.tool_calls || []).forEach((c) => reply.parts.push({ kind: "tool-call", text: callText(c) }));
    }
    // the last round's calls go back to the client: shown after what the round wrote, which stays its answer
    (delta.tool_calls || []).forEach((c) => reply.calls.push({ kind: "tool-call", text: callText(c) }));
    reply.text += delta.content || "";
  }
  const answered = (reply) => [...(reply.rounds || []),
    { role: "assistant", content: reply.text, ...(reply.reasoning ? { reasoning_content: reply.reasoning } : {}) }];

  async function chatPage() {
    const KEY = "tinylm-studio-chat";
    let models;
    try { models = (await getJSON("/api/chat/models")).models; } catch (e) { showError(e.message); return; }
    const options = models.flatMap((m) => m.checkpoints.map((c, i) => ({ value: `${m.run}\n${c}`,
      label: `${m.run} @ ${c}` + (i === 0 ? " (newest)" : "") + (m.stage ? ` [${m.stage}]` : "") })));
    if (!options.length) showError("no run under the root has a chat checkpoint yet (SFT, DPO and RL runs do)");
    const saved = JSON.parse(localStorage.getItem(KEY) || "{}");
    // the conversation: the user's turns, and each pane's own replies to them
    const state = { users: saved.users || [], replies: saved.replies || [[], []], models: saved.models || [] };
    state.replies.flat().forEach((r) => { if (r) r.streaming = false; });  // a reply cut by a reload streams no more
    const panes = ["pane-a", "pane-b"].map((id) => document.getElementById(id));
    panes.forEach((pane, p) => {
      const select = pane.querySelector(".model");
      select.replaceChildren(...(p === 1 ? [el("option", { value: "" }, "(none: one pane)")] : []),
        ...options.map((o) => el("option", { value: o.value }, o.label)));
      const wanted = params.get(p === 0 ? "a" : "b") || state.models[p];
      if (wanted !== undefined && [...select.options].some((o) => o.value === wanted)) select.value = wanted;
      else if (p === 1) select.value = "";
      select.onchange = () => { save(); show(); };
    });
    const chosen = (p) => panes[p].querySelector(".model").value;
    const save = () => localStorage.setItem(KEY, JSON.stringify({ ...state, models: [chosen(0), chosen(1)] }));
    const show = () => panes.forEach((pane, p) => {
      pane.classList.toggle("off", !chosen(p));
      pane.querySelector(".messages").replaceChildren(...state.users.flatMap((text, i) => {
        const reply = state.replies[p][i];
        return [el("div", { class: "message user" }, text),
          ...(reply ? [el("div", { class: "message assistant" + (reply.failed ? " failed" : "") + (reply.streaming ? " streaming" : ""),
            "data-turn": String(i) }, ...(reply.parts || []).map((part) => el("span", { class: "part " + part.kind }, part.text)),
            ...(reply.reasoning ? [el("span", { class: "part reasoning" }, reply.reasoning)] : []),
            el("span", { class: "answer" }, reply.text),
            ...(reply.calls || []).map((part) => el("span", { class: "part " + part.kind }, part.text)))] : [])];
      }));
    });
    const number = (id) => Number(document.getElementById(id).value);
    const ask = async (p, turn) => {
      const [run, checkpoint] = chosen(p).split("\n");
      const system = document.getElementById("system").value.trim();
      const messages = [...(system ? [{ role: "system", content: system }] : []),
        ...state.users.slice(0, turn + 1).flatMap((text, i) => [{ role: "user", content: text },
          ...(i < turn && state.replies[p][i] && !state.replies[p][i].failed ? answered(state.replies[p][i]) : [])])];
      const tools = [...document.querySelectorAll("input.tool:checked")].map((box) => box.value);
      const stop = document.getElementById("stop").value.split(",").map((s) => s.trim()).filter(Boolean);
      const body = { run, checkpoint, messages, temperature: number("temperature"), top_p: number("top_p"),
        max_tokens: number("max_tokens"), seed: number("seed"), stream: true, ...(stop.length ? { stop } : {}),
        ...(tools.length ? { builtin_tools: tools } : {}) };
      const reply = state.replies[p][turn] = { text: "", reasoning: "", parts: [], rounds: [], calls: [], streaming: true };
      try {
        const response = await fetch(withToken("/api/chat"), { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
        if (!response.ok) {
          const answer = await response.json().catch(() => ({}));
          throw new Error(answer.error ? answer.error.message : `${response.status} ${response.statusText}`);
        }
        const reader = response.body.getReader(), decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let cut;
          while ((cut = buffer.indexOf("\n\n")) >= 0) {
            const event = buffer.slice(0, cut).replace(/^data: /, "");
            buffer = buffer.slice(cut + 2);
            if (event === "[DONE]") continue;
            const chunk = JSON.parse(event);
            if (chunk.error) throw new Error(chunk.error.message);
            readDelta(reply, (chunk.choices[0] && chunk.choices[0].delta) || {});
            show();
          }
        }
      } catch (e) { reply.text = e.message; reply.failed = true; }
      reply.streaming = false;
      save();
      show();
    };
    const send = async () => {
      const box = document.getElementById("message"), text = box.value.trim();
      if (!text || !chosen(0)) return;
      box.value = "";
      document.getElementById("error").hidden = true;
      state.users.push(text);
      const turn = state.users.length - 1;
      show();
      await Promise.all([0, 1].filter((p) => chosen(p)).map((p) => ask(p, turn)));
    };
    document.getElementById("send").onclick = send;
    document.getElementById("message").onkeydown = (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); send(); } };
    document.getElementById("clear").onclick = () => { state.users = []; state.replies = [[], []]; save(); show(); };
    show();
  }

  // ---- inside the model: every `tinylm inspect` view of a checkpoint for the prompt typed (/api/inside/*)
  const shown = (t) => JSON.stringify(t).slice(1, -1).replace(/ /g, "␣");  // a token, its spaces and newlines visible
  const quoted = (t) => `"${shown(t)}"`;

  // A table of coloured cells: values[r][c] shaded from white to blue (and red below zero when diverging);
  // text(r, c) is what a cell says (default: nothing), its title the exact value.
  function heatmap(values, rowLabels, colLabels, { lo = 0, hi = 1, diverging = false, text = null, id = null } = {}) {
    const shade = (v) => {
      const x = Math.max(-1, Math.min(1, diverging ? v / Math.max(Math.abs(lo), Math.abs(hi), 1e-9) : (v - lo) / (hi - lo || 1)));
      return x >= 0 ? `hsl(218 75% ${Math.round(97 - 52 * x)}%)` : `hsl(12 75% ${Math.round(97 + 52 * x)}%)`;
    };
    const table = el("table", { class: "heat", ...(id ? { id } : {}) },
      el("tr", {}, el("th"), ...colLabels.map((c) => el("th", {}, c))),
      ...values.map((row, r) => el("tr", {}, el("th", {}, rowLabels[r]), ...row.map((v, c) => {
        const cell = el("td", { title: `${rowLabels[r]} × ${colLabels[c]}: ${fmt(v)}`, "data-value": String(v) },
          text ? text(r, c) : "");
        cell.style.background = shade(v);
        if (Math.abs(diverging ? v / Math.max(Math.abs(lo), Math.abs(hi), 1e-9) : (v - lo) / (hi - lo || 1)) > 0.6) cell.style.color = "#fff";
        return cell;
      }))));
    return el("div", { class: "heat-wrap" }, table);
  }

  async function insidePage() {
    let runs;
    try { runs = (await getJSON("/api/runs")).runs.filter((r) => r.checkpoints.length); } catch (e) { showError(e.message); return; }
    const $ = (id) => document.getElementById(id);
    const runSelect = $("run");
    runSelect.replaceChildren(...runs.map((r) => el("option", { value: r.name }, r.name)));
    if (params.get("name")) runSelect.value = params.get("name");
    const fillSteps = async () => {  // checkpoints and weights-only snapshots, newest first
      let steps = [];
      try { steps = (await getJSON(`/api/inside/steps?name=${encodeURIComponent(runSelect.value)}`)).steps; } catch (e) { fail(e); }
      $("step").replaceChildren(el("option", { value: "" }, "newest"),
        ...steps.reverse().map((s) => el("option", { value: String(s) }, `step ${s}`)));
    };
    const fail = (e) => { showError(e.message); };
    const query = (view, fields) => {
      const chat = ["lens", "attention", "attribution", "patch"].includes(view) && $("chat").checked ? { chat: "true" } : {};
      const q = new URLSearchParams({ name: runSelect.value, ...chat, ...fields });
      if ($("step").value) q.set("step", $("step").value);
      return getJSON(`/api/inside/${view}?${q}`);
    };
    let attention = null;

    const drawLens = (a) => {
      const rows = a.lens.map((_, l) => l === a.lens.length - 1 ? `block ${l} (output)` : `block ${l}`);
      const top = a.lens.map((layer) => layer.map((cell) => cell.probs[0]));
      $("lens").replaceChildren(heatmap(top, rows, a.tokens.map(shown), { text: (r, c) => shown(a.lens[r][c].tokens[0]).slice(0, 10), id: "lens-grid" }));
      if (a.target) $("lens").append(el("p", { class: "note" }, `target ${quoted(a.target.token)} at the last position: ` +
        a.target.prob.map((p, l) => `block ${l} p=${p[p.length - 1].toFixed(3)} (rank ${a.target.rank[l][p.length - 1]})`).join(", ")));
    };
    const drawPattern = () => {
      if (!attention) return;
      const layerIndex = Number($("layer").value), head = Number($("head").value);
      const A = attention.attention[layerIndex][head];
      const labels = attention.tokens.map(shown);
      $("pattern").replaceChildren(heatmap(A, labels, labels, { id: "attention-grid" }));
    };
    const drawAttention = (a) => {
      attention = a;
      $("kind").textContent = a.attention_kind;
      $("layer").replaceChildren(...a.layers.map((l, i) => el("option", { value: String(i) }, String(l))));
      $("head").replaceChildren(...a.attention[0].map((_, h) => el("option", { value: String(h) }, `${h} (kv ${a.kv_head[h]})`)));
      drawPattern();
      const names = ["entropy", "previous_token", "first_token", "induction"];
      $("scores").replaceChildren(el("table", { id: "head-scores" }, el("tr", {}, ...["layer", "head", "kv head", ...names].map((n) => el("th", {}, n))),
        ...a.layers.flatMap((l, i) => a.attention[i].map((_, h) => el("tr", {}, el("td", {}, String(l)), el("td", {}, String(h)),
          el("td", {}, String(a.kv_head[h])), ...names.map((n) => el("td", { class: "num" }, a.scores[n][i][h].toFixed(3))))))));
    };
    const drawAttribution = (a) => {
      const parts = [...a.parts].sort((x, y) => Math.abs(y.value) - Math.abs(x.value));
      const biggest = Math.max(...parts.map((p) => Math.abs(p.value)), 1e-9);
      $("attribution").replaceChildren(
        el("p", {}, `logit of ${quoted(a.target.token)}${a.versus ? " minus " + quoted(a.versus.token) : ""}: ${a.logit.toFixed(4)}; ` +
          `parts sum to ${a.sum.toFixed(4)} (residual error ${a.residual_error.toExponential(1)})` + (a.before_soft_cap ? ", before the soft cap" : "")),
        ...parts.slice(0, 24).map((p) => el("div", { class: "bar-row", "data-part": p.name }, el("span", {}, p.name), el("span", { class: "num" }, p.value.toFixed(4)),
          el("div", { class: "bar " + (p.value >= 0 ? "pos" : "neg"), style: `width:${(100 * Math.abs(p.value) / biggest).toFixed(1)}%` }))));
    };
    const look = () => {
      $("error").hidden = true;
      const prompt = $("prompt").value, target = $("target").value;
      query("lens", target ? { prompt, target } : { prompt }).then(drawLens, fail);
      query("attention", { prompt }).then(drawAttention, fail);
      query("attribution", target ? { prompt, target } : { prompt }).then(drawAttribution, fail);
    };
    const patch = () => {
      $("error").hidden = true;
      query("patch", { clean: $("clean").value, corrupt: $("corrupt").value, metric: $("metric").value }).then((a) => {
        const positions = a.clean.tokens.map(shown);
        const layers = (n, first) => Array.from({ length: n }, (_, i) => first(i));
        const opts = (id) => ({ lo: -1, hi: 1, diverging: true, id });
        $("patch").replaceChildren(
          el("p", {}, `${a.metric.name} of ${quoted(a.answer.token)} vs ${quoted(a.wrong.token)}: clean ${a.metric.clean.toFixed(3)}, corrupted ${a.metric.corrupted.toFixed(3)}`),
          el("h3", {}, "residual stream (row 0: the embedding; row l: after block l-1)"),
          heatmap(a.residual, layers(a.residual.length, (i) => i === 0 ? "embedding" : `after block ${i - 1}`), positions, opts("patch-residual")),
          el("h3", {}, "MLP outputs"), heatmap(a.mlp, layers(a.mlp.length, (i) => `MLP ${i}`), positions, opts("patch-mlp")),
          el("h3", {}, "head outputs (every position)"),
          heatmap(a.heads, layers(a.heads.length, (i) => `layer ${i}`), a.heads[0].map((_, h) => `H${h}`), opts("patch-heads")));
      }, fail);
    };
    const neurons = (fields) => {
      $("error").hidden = true;
      query("neurons", fields).then((a) => {
        if (a.neighbours) {
          $("neurons").replaceChildren(el("p", {}, `nearest tokens to ${quoted(a.token.token)} in the embedding:`),
            ...a.neighbours.map((n) => el("div", { class: "example" }, `${n.cosine.toFixed(3)}  ${quoted(n.token)}`)));
          return;
        }
        const top = Math.max(...a.examples.map((e) => e.activation), 1e-9);
        $("neurons").replaceChildren(el("p", {}, `layer ${a.layer}, neuron ${a.neuron}: its strongest activations over ${a.windows} dev windows`),
          ...a.examples.map((e) => el("div", { class: "example" }, el("b", {}, e.activation.toFixed(3) + "  "),
            ...e.tokens.map((t, i) => { const s = el("span", { class: "token", title: fmt(e.activations[i]) }, t);
              s.style.background = `hsl(30 95% ${Math.round(97 - 45 * Math.max(0, e.activations[i]) / top)}%)`;
              if (i === e.at) s.style.outline = "1px solid #1d2330";
              return s; }))));
      }, fail);
    };
    const induction = () => {
      $("error").hidden = true;
      $("induction-go").disabled = true;
      query("induction", {}).then(async (a) => {
        const notes = await metricNotes();
        const heads = {};
        a.induction[0].forEach((row, l) => row.forEach((_, h) => { heads[`L${l}H${h}`] = a.steps.map((s, k) => ({ step: s, "induction score": a.induction[k][l][h] })); }));
        $("induction").replaceChildren(); $("icl").replaceChildren();
        new Charts($("induction"), notes).draw(heads, Object.keys(heads), "step", 0, false);
        new Charts($("icl"), notes).draw({ ICL: a.steps.map((s, k) => ({ step: s, "in-context learning score": a.icl[k] })) }, ["ICL"], "step", 0, false);
      }, fail).finally(() => { $("induction-go").disabled = false; });
    };
    runSelect.onchange = () => { fillSteps(); look(); };
    fillSteps();
    $("step").onchange = look;
    $("chat").onchange = look;
    $("look").onclick = look;
    $("prompt").onkeydown = (e) => { if (e.key === "Enter") look(); };
    $("layer").onchange = drawPattern;
    $("head").onchange = drawPattern;
    $("patch-go").onclick = patch;
    $("neuron-go").onclick = () => neurons({ layer: $("n-layer").value, neuron: $("n-index").value });
    $("token-go").onclick = () => neurons({ token: $("n-token").value });
    $("induction-go").onclick = induction;
    look();
  }


  // ---- the scaling page: a sweep's IsoFLOP curves drawn from its points and fit.json, its fits and its PNGs
  function plainTable(headers, rows, id) {
    return el("table", { class: "plain", ...(id ? { id } : {}) }, el("tr", {}, ...headers.map((h) => el("th", {}, h))),
      ...rows.map((row) => el("tr", {}, ...row.map((v) => el("td", {}, typeof v === "number" ? fmt(v) : v)))));
  }

  function isoflopChart(data) {
    const box = document.getElementById("isoflop");
    box.replaceChildren();
    const byBudget = new Map();
    for (const p of data.points) (byBudget.get(p.budget) || byBudget.set(p.budget, []).get(p.budget)).push(p);
    const budgets = [...byBudget.keys()].sort((a, b) => a - b);
    if (!budgets.length) { box.append(el("p", { class: "note" }, "no finished runs yet")); return; }
    const fits = new Map(((data.fit && data.fit.approach2) ? data.fit.approach2.curves : []).map((c) => [c.flops, c]));
    const curveOf = (budget) => [...fits.values()].find((c) => Math.abs(c.flops / budget - 1) < 0.05);
    const xs = new Set(data.points.map((p) => p.params));
    const parabola = new Map();
    for (const budget of budgets) {
      const c = curveOf(budget);
      if (!c) continue;
      const lo = Math.log(Math.min(...c.sizes)), hi = Math.log(Math.max(...c.sizes));
      const pts = Array.from({ length: 40 }, (_, i) => Math.exp(lo + (hi - lo) * i / 39));
      pts.forEach((x) => xs.add(x));
      parabola.set(budget, new Map(pts.map((x) => [x, c.parabola[0] * Math.log(x) ** 2 + c.parabola[1] * Math.log(x) + c.parabola[2]])));
    }
    const x = [...xs].sort((a, b) => a - b);
    const series = [{}], columns = [x];
    budgets.forEach((budget, i) => {
      const color = COLORS[i % COLORS.length];
      const at = new Map(byBudget.get(budget).map((p) => [p.params, p.loss]));
      series.push({ label: `${budget.toExponential(2)} FLOPs`, stroke: color, paths: () => null,
        points: { show: true, size: 8, fill: color } });
      columns.push(x.map((v) => at.has(v) ? at.get(v) : null));
      if (parabola.has(budget)) {
        const line = parabola.get(budget);
        series.push({ label: "parabola", stroke: color, width: 1.5, spanGaps: true, points: { show: false } });
        columns.push(x.map((v) => line.has(v) ? line.get(v) : null));
      }
    });
    const opts = { width: Math.min(900, box.clientWidth || 900), height: 360, title: "IsoFLOP curves",
      scales: { x: { time: false, distr: 3 } }, series,
      axes: [{ label: "parameters N" }, { label: "final dev loss (nats/token)" }] };
    new uPlot(opts, columns, box);
  }

  const sci = (v) => Math.abs(v) >= 1e6 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : fmt(v);

  async function scalingPage() {
    const select = document.getElementById("sweep");
    let listing;
    try { listing = await getJSON("/api/scaling"); } catch (e) { showError(e.message); return; }
    if (!listing.sweeps.length) { showError("no sweep under the runs root: run `tinylm scaling --out RUNS/NAME`"); return; }
    for (const name of listing.sweeps) select.append(el("option", { value: name }, name));
    const wanted = params.get("name");
    if (wanted && listing.sweeps.includes(wanted)) select.value = wanted;
    async function show() {
      let data;
      try { data = await getJSON("/api/scaling/sweep?name=" + encodeURIComponent(select.value)); } catch (e) { showError(e.message); return; }
      document.getElementById("error").hidden = true;
      const grid = data.sweep || {};
      document.getElementById("summary").textContent = `${data.points.length} runs done of budgets ${(grid.budgets || []).map((b) => b.toExponential(2)).join(", ")} x depths ${(grid.depths || []).join(", ")}`;
      isoflopChart(data);
      const fit = data.fit;
      document.getElementById("fit-section").hidden = !fit;
      if (fit) {
        document.getElementById("fit").replaceChildren(plainTable(["parameter", "fit", "95% interval"],
          ["E", "A", "B", "alpha", "beta"].map((k) => [k, sci(fit[k]), `${sci(fit[k + "_interval"][0])} – ${sci(fit[k + "_interval"][1])}`]), "law"));
        document.getElementById("budgets").replaceChildren(plainTable(["budget (6ND)", "N_opt (3)", "D/N (3)", "interval", "N* (2)", "D*/N* (2)"],
          fit.budgets.map((b) => [b.six_nd.toExponential(2), Math.round(b.params_opt), b.tokens_per_param,
            `${fmt(b.tokens_per_param_interval[0])} – ${fmt(b.tokens_per_param_interval[1])}`,
            b.approach2_params ? Math.round(b.approach2_params) : "–", b.approach2_tokens_per_param ?? "–"])));
      }
      const pred = data.prediction;
      document.getElementById("prediction-section").hidden = !pred;
      if (pred) {
        const rows = [["budget", pred.budget.toExponential(3)], ["depth", pred.depth], ["predicted dev loss", pred.predicted_loss],
          ["95% interval", `${fmt(pred.predicted_interval[0])} – ${fmt(pred.predicted_interval[1])}`]];
        if (pred.measured) rows.push(["measured (seeds)", pred.measured.map(fmt).join(", ")], ["error", `${pred.error > 0 ? "+" : ""}${(100 * pred.error).toFixed(2)}%`]);
        document.getElementById("prediction").replaceChildren(plainTable(["", ""], rows, "prediction-table"));
      }
      document.getElementById("points").replaceChildren(plainTable(["run", "budget", "depth", "N", "D", "dev loss", "wall"],
        data.points.map((p) => [p.run, p.budget.toExponential(2), p.depth, p.params, p.tokens, p.loss, duration(p.wall_s)]), "points-table"));
      document.getElementById("plots-section").hidden = !data.plots.length;
      document.getElementById("plots").replaceChildren(...data.plots.map((file) => el("img", { alt: file, class: "plot",
        src: withToken(`/api/scaling/plot?name=${encodeURIComponent(select.value)}&file=${file}`) })));
    }
    select.onchange = show;
    await show();
  }

  return { runsPage, runPage, comparePage, launchPage, tokensPage, dataPage, chatPage, insidePage, scalingPage };
})();
