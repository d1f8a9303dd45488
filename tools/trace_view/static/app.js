// The trace sink's browser view: #/ lists recent traces, #/trace/<id> shows one as a waterfall.
// Everything from the server is put in the page as text (textContent), never as HTML.

const PALETTE_SIZE = 10;
let services = []; // every service the sink has seen, sorted: a service keeps its color
let autoTimer = null;
let shown = 0; // bumped by every load: only the latest load's answer is shown

const $ = (id) => document.getElementById(id);

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(child instanceof Node ? child : String(child));
    }
  }
  return node;
}

function colorClass(service) {
  let i = services.indexOf(service);
  if (i < 0) {
    i = 0;
    for (const ch of service) i = (i * 31 + ch.codePointAt(0)) >>> 0;
  }
  return `svc-${i % PALETTE_SIZE}`;
}

function serviceChip(service) {
  return el("span", { class: `chip ${colorClass(service)}`, text: service });
}

function ms(value) {
  if (value >= 1000) return `${(value / 1000).toFixed(2)} s`;
  if (value >= 100) return `${value.toFixed(0)} ms`;
  if (value >= 10) return `${value.toFixed(1)} ms`;
  return `${value.toFixed(2)} ms`;
}

function clock(unixMs) {
  const d = new Date(unixMs);
  const time = d.toLocaleTimeString([], { hour12: false });
  const millis = String(d.getMilliseconds()).padStart(3, "0");
  const today = new Date().toDateString() === d.toDateString();
  return `${today ? "" : `${d.toLocaleDateString()} `}${time}.${millis}`;
}

function ago(unixMs) {
  const s = Math.max(0, Math.round((Date.now() - unixMs) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

async function getJSON(url) {
  let response;
  try {
    response = await fetch(url, { headers: { Accept: "application/json" } });
  } catch (err) {
    throw new Error(`The trace sink does not answer (${err.message}). Is it running?`);
  }
  let body = null;
  try {
    body = await response.json();
  } catch {
    // not JSON: the status says enough
  }
  if (!response.ok) {
    const why = body && body.error ? body.error : response.statusText;
    const error = new Error(`${response.status}: ${why}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

// ---- the list ----------------------------------------------------------------------------------

function fillServices(all) {
  services = all;
  const select = $("service");
  const chosen = select.value;
  select.replaceChildren(el("option", { value: "", text: "all services" }));
  for (const name of all) select.append(el("option", { value: name, text: name }));
  select.value = all.includes(chosen) ? chosen : "";
}

function traceRow(t) {
  const href = `#/trace/${t.trace_id}`;
  const row = el(
    "tr",
    { class: t.error_count ? "has-errors" : "", "data-trace-id": t.trace_id },
    el(
      "td",
      { class: "time" },
      el("span", { text: clock(t.start_unix_ms) }),
      el("span", { class: "muted small", text: ` ${ago(t.start_unix_ms)}` }),
    ),
    el(
      "td",
      { class: "root" },
      serviceChip(t.root_service),
      el("a", { href, class: "root-name", text: t.root_name }),
      t.has_root ? null : el("span", { class: "muted small", text: " (root span not received)" }),
    ),
    el("td", { class: "services" }, ...t.services.map(serviceChip)),
    el("td", { class: "num", text: ms(t.duration_ms) }),
    el("td", { class: "num", text: t.span_count }),
    el(
      "td",
      { class: "num" },
      t.error_count ? el("span", { class: "badge-error", text: t.error_count }) : "0",
    ),
  );
  row.addEventListener("click", (event) => {
    if (event.target.closest("a") === null) location.hash = href;
  });
  return row;
}

async function loadList() {
  const mine = ++shown;
  const params = new URLSearchParams({ limit: $("limit").value });
  if ($("service").value) params.set("service", $("service").value);
  $("list-status").textContent = "loading…";
  try {
    const data = await getJSON(`/api/traces?${params}`);
    if (mine !== shown) return;
    fillServices(data.services);
    $("traces").tBodies[0].replaceChildren(...data.traces.map(traceRow));
    $("empty").hidden = data.traces.length > 0;
    $("traces").hidden = data.traces.length === 0;
    $("list-status").textContent = `${data.traces.length} traces, ${clock(Date.now())}`;
    showError("");
  } catch (err) {
    if (mine !== shown) return;
    $("list-status").textContent = "";
    showError(err.message);
  }
}

function setAuto() {
  clearInterval(autoTimer);
  autoTimer = null;
  if ($("auto").checked && !$("list-view").hidden) autoTimer = setInterval(loadList, 5000);
}

// ---- one trace ---------------------------------------------------------------------------------

function detailPanel(span) {
  const facts = [
    ["Service", serviceChip(span.service)],
    ["Kind", span.kind],
    ["Status", span.status_message ? `${span.status}: ${span.status_message}` : span.status],
    ["Start", `+${ms(span.offset_ms)}`],
    ["Duration", ms(span.duration_ms)],
    ["Span ID", el("code", { text: span.span_id })],
    [
      "Parent",
      span.parent_id
        ? el("code", { text: span.parent_id + (span.orphan ? " (not received)" : "") })
        : "none (root)",
    ],
  ];
  if (span.links) facts.push(["Links", `${span.links} linked span(s)`]);
  const dl = el("dl", { class: "facts" });
  for (const [term, value] of facts) dl.append(el("dt", { text: term }), el("dd", {}, value));

  const panel = el("div", { class: "detail" }, dl, attributeTable("Attributes", span.attributes));
  for (const event of span.events) {
    panel.append(
      attributeTable(`Event “${event.name}” at +${ms(event.offset_ms)}`, event.attributes, "event"),
    );
  }
  return panel;
}

function attributeTable(title, attributes, kind = "attributes") {
  const keys = Object.keys(attributes).sort();
  const table = el("table", { class: `attrs ${kind}` }, el("caption", { text: title }));
  if (keys.length === 0) {
    table.append(el("tr", {}, el("td", { class: "muted", colspan: "2", text: "none" })));
  }
  for (const key of keys) {
    const value = attributes[key];
    const text = typeof value === "string" ? value : JSON.stringify(value);
    const cell = text.includes("\n") ? el("pre", { text }) : text;
    table.append(el("tr", {}, el("th", { scope: "row", text: key }), el("td", {}, cell)));
  }
  return table;
}

function axis(total) {
  const lane = el("div", { class: "lane axis" });
  for (const f of [0, 0.25, 0.5, 0.75, 1]) {
    const tick = el("span", { class: "tick", text: ms(total * f) });
    if (f === 1) tick.style.right = "0";
    else tick.style.left = `${f * 100}%`;
    lane.append(tick);
  }
  return el("div", { class: "wf-head" }, el("div", { class: "label", text: "Span" }), lane);
}

function spanRow(span, total) {
  const start = total > 0 ? (span.offset_ms / total) * 100 : 0;
  const width = total > 0 ? (span.duration_ms / total) * 100 : 100;
  const bar = el("span", { class: `bar ${colorClass(span.service)}` });
  bar.style.left = `${start}%`;
  bar.style.width = `${width}%`;
  const duration = el("span", { class: "dur", text: ms(span.duration_ms) });
  if (start + width > 75) duration.style.right = `calc(${100 - start}% + 6px)`;
  else duration.style.left = `calc(${start + width}% + 6px)`;

  const label = el(
    "span",
    { class: "label" },
    el("span", { class: `dot ${colorClass(span.service)}` }),
    el("span", { class: "svc", text: span.service }),
    el("span", { class: "name", text: span.name }),
    span.status === "error" ? el("span", { class: "badge-error", text: "error" }) : null,
  );
  label.style.paddingLeft = `${8 + span.depth * 18}px`;

  const button = el(
    "button",
    {
      type: "button",
      class: "row",
      "aria-expanded": "false",
      "data-span-id": span.span_id,
      "data-depth": span.depth,
      title: `${span.service} · ${span.name} · ${span.kind}`,
    },
    label,
    el("span", { class: "lane" }, bar, duration),
  );
  const item = el("div", { class: span.status === "error" ? "span error" : "span" }, button);
  let panel = null;
  button.addEventListener("click", () => {
    const open = button.getAttribute("aria-expanded") === "true";
    button.setAttribute("aria-expanded", String(!open));
    if (!panel) {
      panel = detailPanel(span);
      item.append(panel);
    }
    panel.hidden = open;
  });
  return item;
}

async function loadTrace(traceId) {
  const mine = ++shown;
  $("trace-title").textContent = "loading…";
  $("trace-meta").replaceChildren();
  $("legend").replaceChildren();
  $("waterfall").replaceChildren();
  $("cli").textContent = `make traces TRACE=${traceId}`;
  let trace;
  try {
    trace = await getJSON(`/api/traces/${traceId}`);
    if (mine !== shown) return;
    showError("");
  } catch (err) {
    if (mine !== shown) return;
    $("trace-title").textContent = `Trace ${traceId}`;
    showError(
      err.status === 404
        ? `No trace ${traceId} here (yet): the sink keeps only the most recent spans.`
        : err.message,
    );
    return;
  }
  services = trace.services;
  const root = trace.spans[0];
  document.title = `${root.name} · traces · agora`;
  $("trace-title").replaceChildren(serviceChip(root.service), ` ${root.name}`);
  $("trace-meta").replaceChildren(
    el("span", { text: clock(trace.start_unix_ms) }),
    el("span", { text: ms(trace.duration_ms) }),
    el("span", { text: `${trace.span_count} spans` }),
    el("span", {
      class: trace.error_count ? "errors" : "",
      text: `${trace.error_count} error${trace.error_count === 1 ? "" : "s"}`,
    }),
    el("code", { text: trace.trace_id }),
  );
  const used = [...new Set(trace.spans.map((s) => s.service))].sort();
  $("legend").replaceChildren(...used.map(serviceChip));
  $("waterfall").replaceChildren(
    axis(trace.duration_ms),
    ...trace.spans.map((s) => spanRow(s, trace.duration_ms)),
  );
}

// ---- routing -----------------------------------------------------------------------------------

function route() {
  const match = location.hash.match(/^#\/trace\/([0-9a-fA-F]{32})$/);
  $("list-view").hidden = match !== null;
  $("trace-view").hidden = match === null;
  showError("");
  if (match) {
    loadTrace(match[1].toLowerCase());
  } else {
    document.title = "Traces · agora";
    loadList();
  }
  setAuto();
}

$("filters").addEventListener("submit", (event) => {
  event.preventDefault();
  loadList();
});
$("service").addEventListener("change", loadList);
$("limit").addEventListener("change", loadList);
$("auto").addEventListener("change", setAuto);
window.addEventListener("hashchange", route);
route();
