// The status page's script: served as a file, the page allows no inline script.
"use strict";
const params = new URLSearchParams(location.search);
const refreshSeconds = Math.max(2, Number(params.get("refresh")) || 5);
const KEY_ITEM = "ops-operator-key";
// The last hour's figures are read from the stores (a listing of each): once a minute.
const SUMMARY_EVERY_MS = 60_000;
const PAGE = 50;
const SVG = "http://www.w3.org/2000/svg";

let summaryLoadedAt = 0;
let timersMissing = false; // /api/timers answered 404: this app has no timer ledger
let clockOffset = 0; // the host's clock (its Date header) minus this browser's, in ms
let lastGood = null; // when every endpoint last answered
let overview = null;
let timers = null;
const markers = { locks: [], runs: [], jobs: [], imports: [] }; // the pages walked, per table

function credentials() {
  const key = sessionStorage.getItem(KEY_ITEM);
  return key ? { "X-Operator-Key": key } : {};
}

// -- time, as an operator reads it: relative, the absolute (UTC) beside or on hover ------------

function now() {
  return Date.now() + clockOffset;
}

function absolute(iso) {
  const time = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)/.exec(iso || "");
  return time ? `${time[1]} ${time[2]} UTC` : String(iso);
}

function clockTime(ms) {
  return new Date(ms).toISOString().slice(11, 19);
}

function duration(seconds) {
  const s = Math.round(Math.abs(seconds));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 10) return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
  return `${Math.floor(h / 24)} d`;
}

function secondsFrom(iso) {
  return (Date.parse(iso) - now()) / 1000;
}

// `phrases`: [[before, after] for a time past, [before, after] for one to come] around the
// duration: HELD gives "held 3 min", AGO "3 min ago" or "in 3 min".
function when(iso, phrases) {
  const span = document.createElement("time");
  if (!iso) {
    span.textContent = "–";
    return span;
  }
  const s = secondsFrom(iso);
  const [before, after] = s <= 0 ? phrases[0] : phrases[1];
  span.dateTime = iso;
  span.title = absolute(iso);
  span.textContent = `${before} ${duration(s)}${after}`.trim();
  return span;
}

const AGO = [["", " ago"], ["in", ""]];
const EXPIRES = [["expired", " ago"], ["expires in", ""]];
const HELD = [["held", ""], ["held", ""]];
const AGE = [["age", ""], ["age", ""]];
const NEXT = [["due", " ago"], ["in", ""]];
const DUE = [["due", " ago"], ["due in", ""]];

// -- the API ---------------------------------------------------------------------------------

class SignInNeeded extends Error {
  constructor(message, loginUrl) {
    super(message);
    this.loginUrl = loginUrl;
  }
}

class EndpointFailed extends Error {}

async function api(path) {
  const endpoint = `/api/${path.split("?")[0]}`;
  let response;
  try {
    response = await fetch(path, { headers: credentials() });
  } catch (error) {
    throw new EndpointFailed(`${endpoint} failed (${error.message})`);
  }
  const date = Date.parse(response.headers.get("Date") || "");
  if (!Number.isNaN(date)) clockOffset = date - Date.now();
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) throw new SignInNeeded(body.error || "sign in", body.login_url);
  if (!response.ok) {
    const error = new EndpointFailed(`${endpoint} failed (${response.status} ${body.error || ""})`.trim());
    error.status = response.status;
    throw error;
  }
  return body;
}

// -- building blocks -------------------------------------------------------------------------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function shown(value) {
  if (value === null || value === undefined || value === "") return "–";
  if (typeof value === "boolean") return value ? "yes" : "no";
  return /^\d{4}-\d\d-\d\dT\d\d:\d\d/.test(value) ? absolute(value) : String(value);
}

function button(label, onClick, className) {
  const node = el("button", className || "", label);
  node.type = "button";
  node.addEventListener("click", onClick);
  return node;
}

function say(text, isError) {
  const box = document.getElementById("message");
  box.textContent = text;
  box.className = isError ? "error" : "";
}

// -- tables ----------------------------------------------------------------------------------

const scopeOf = (row) => row.scope || "app";
const views = {
  locks: {
    columns: [
      ["Key", (r) => el("span", "key", r.key)],
      ["State", (r) => el("span", r.held ? "held" : "free", r.held ? "held" : "free")],
      ["Held", (r) => (r.held && r.since ? when(r.since, HELD) : "–")],
      ["Holder", (r) => r.instance],
      ["Function", (r) => r.function],
      ["Token", (r) => r.token],
      ["Waiting", (r) => r.waiting],
    ],
    action: (row) => row.held && button("Break", () => change("locks", row, "break"), "danger"),
  },
  runs: {
    columns: [
      ["Key", (r) => el("span", "key", r.key)],
      ["Function", scopeOf],
      ["State", (r) => el("span", r.state, r.state.replace("_", " "))],
      ["Attempt", (r) => r.attempt],
      ["Owner", (r) => r.owner],
      ["Started", (r) => when(r.started, AGO)],
      ["Expires", (r) => when(r.expires, EXPIRES)],
    ],
    action: (row) => button("Reset", () => change("runs", row, "reset"),
      row.state === "completed" ? "quiet" : "danger"),
  },
  jobs: {
    columns: [
      ["Job", (r) => el("span", "key", r.job_id)],
      ["State", (r) => el("span", r.state.replace(/ /g, "_"), r.state)],
      ["Done", (r) => r.units_done],
      ["Failed", (r) => r.units_failed],
      ["Outstanding", (r) => r.units_outstanding],
      ["Callback", (r) => r.callback],
      ["Age", (r) => when(r.created, AGE)],
    ],
  },
  imports: {
    columns: [
      ["Account", (r) => el("span", "key", r.account)],
      ["State", (r) => el("span", r.status.replace(/ /g, "_"), r.status)],
      ["Run", (r) => r.run_id],
      ["Started", (r) => when(r.started_at, AGO)],
      ["Imported", (r) => r.imported],
      ["Rejected", (r) => r.rejected],
      ["Errors", (r) => r.errors],
      ["Last run with data", (r) => lastWithData(r)],
    ],
  },
  timers: {
    columns: [
      ["Function", (r) => el("span", "key", r.function)],
      ["State", (r) => el("span", r.late ? "late" : "on_time", r.late ? "late" : "on time")],
      ["Schedule", (r) => r.schedule],
      ["Last run", (r) => (r.last_run ? when(r.last_run.finished || r.last_run.occurrence, AGO) : "never")],
      ["Outcome", (r) => r.last_run && r.last_run.outcome],
      ["Next due", (r) => when(r.next_due, DUE)],
      ["Missed", (r) => (r.missed || []).length],
      ["Skipped", (r) => (r.skipped || []).length],
    ],
  },
  summary: {
    columns: [
      ["Flow", (r) => r.section],
      ["Figure", (r) => r.figure],
      ["Count", (r) => (r.value === null || r.value === undefined ? el("span", "empty", "not stored") : r.value)],
      ["Read from", (r) => r.source],
    ],
  },
};

function lastWithData(row) {
  const run = row.last_with_data;
  if (!run) return "–";
  const span = el("span", "", `${run.run_id}: ${(run.totals || {}).imported ?? "?"} imported, `);
  span.append(when(run.started_at, AGO));
  return span;
}

function rowKey(name, item) {
  if (name === "summary") return item.figure;
  return item.key || item.job_id || item.account || item.function || "";
}

function render(name, items) {
  const view = views[name];
  const table = document.getElementById(name);
  const head = document.createElement("tr");
  for (const [label] of view.columns) head.append(el("th", "", label));
  if (view.action) head.append(el("th", "", ""));
  table.tHead.replaceChildren(head);
  const rows = items.map((item) => {
    const tr = document.createElement("tr");
    tr.dataset.key = rowKey(name, item);
    if (item.scope) tr.dataset.scope = item.scope;
    for (const [label, value] of view.columns) {
      const td = el("td");
      td.dataset.label = label;
      const shownValue = value(item);
      if (shownValue instanceof Node) td.append(shownValue);
      else td.textContent = shown(shownValue);
      if (label === "State") td.className = "state";
      tr.append(td);
    }
    if (view.action) {
      const td = el("td", "action");
      td.dataset.label = "";
      const action = view.action(item);
      if (action) td.append(action);
      tr.append(td);
    }
    return tr;
  });
  if (!rows.length) {
    const tr = document.createElement("tr");
    const td = el("td", "empty", "none");
    td.colSpan = view.columns.length + 1;
    tr.append(td);
    rows.push(tr);
  }
  table.tBodies[0].replaceChildren(...rows);
}

// "50 of 69" when the total is known, else what this page holds; next and first page.
function pager(name, body, total) {
  const note = document.getElementById(`${name}-note`);
  const nav = document.getElementById(`${name}-pager`);
  const stack = markers[name];
  const first = stack.length ? stack.length * PAGE + 1 : 1;
  const shownCount = body.items.length;
  const last = first + shownCount - 1;
  let text;
  if (total !== undefined && total !== null) {
    text = shownCount ? `${first}–${last} of ${total}` : `none of ${total} on this page`;
  } else {
    text = shownCount ? `${first}–${last}${body.next ? ", more after" : ", all"}` : "none";
  }
  if (body.partial) text += " (the listing stopped early: more may follow)";
  note.textContent = `· ${text}`;
  const buttons = [];
  if (stack.length) {
    buttons.push(button("First page", () => { markers[name] = []; loadTable(name).catch(() => {}); }, "quiet"));
  }
  if (body.next) {
    buttons.push(button("Next page", () => { markers[name].push(body.next); loadTable(name).catch(() => {}); }, "quiet"));
  }
  nav.replaceChildren(...buttons);
}

async function loadTable(name) {
  const stack = markers[name];
  const marker = stack.length ? `&next=${encodeURIComponent(stack[stack.length - 1])}` : "";
  const body = await api(`${name}?limit=${PAGE}${marker}`);
  if (body.namespace) document.getElementById("namespace").textContent = `namespace ${body.namespace}`;
  render(name, body.items);
  const total = name === "runs" && overview ? Object.values(overview.counts.runs).reduce((a, b) => a + b, 0) : null;
  pager(name, body, total);
}

// -- what needs a person ---------------------------------------------------------------------

function problem(kind, key, title, parts, action) {
  const li = el("li", `problem p-${kind}`);
  li.dataset.kind = kind;
  li.dataset.key = key;
  const head = el("div", "problem-head");
  head.append(el("span", "badge", title), el("span", "key", key));
  li.append(head);
  const detail = el("div", "detail");
  for (const part of parts.filter((p) => p !== null && p !== undefined && p !== "")) {
    if (part.wide !== undefined) { // detail a phone's first screen has no room for
      if (!part.wide) continue;
      const node = part.wide instanceof Node ? part.wide : el("span", "", part.wide);
      node.classList.add("wide");
      detail.append(node);
    } else {
      detail.append(part instanceof Node ? part : el("span", "", part));
    }
  }
  li.append(detail);
  if (action) {
    li.classList.add("has-action");
    li.append(action);
  }
  return li;
}

const wide = (part) => ({ wide: part || "" });

// A function's scope by its name (the module path on hover).
function functionName(scope) {
  const span = el("span", "", `in ${scope ? scope.split(".").pop() : "the app"}`);
  if (scope) span.title = scope;
  return span;
}

function labelled(text, node) {
  const span = el("span", "", `${text} `);
  span.append(node);
  return span;
}

function renderProblems() {
  if (!overview) return;
  const o = overview;
  const items = [];
  for (const lock of o.held_locks) {
    items.push(problem("lock", lock.key, "lock held", [
      lock.since ? when(lock.since, HELD) : "held (holder not yet published)",
      lock.instance && `by ${lock.instance}`,
      lock.function && `in ${lock.function}`,
      lock.waiting ? `${lock.waiting} waiting` : "",
      wide(`token ${lock.token}`),
      wide(lock.since && `since ${absolute(lock.since)}`),
      wide(lock.last_change && labelled("owner record written", when(lock.last_change, AGO))),
      wide("the lease ends ≤ 60 s after its holder's last renewal"),
    ], button("Break", () => change("locks", lock, "break"), "danger")));
  }
  for (const run of o.runs) {
    const expired = run.state === "expired";
    items.push(problem(expired ? "expired" : "in_progress", run.key, expired ? "run expired" : "run in progress", [
      functionName(run.scope),
      labelled("started", when(run.started, AGO)),
      when(run.expires, EXPIRES),
      wide(`attempt ${run.attempt}`),
      wide(run.owner && `owner ${run.owner}`),
      wide(expired ? "its run stopped without finishing: the next delivery takes it over" : ""),
    ], button("Reset", () => change("runs", run, "reset"), "danger")));
  }
  for (const job of o.failing_callbacks) {
    const failing = job.callback_failing;
    items.push(problem("callback", job.job_id, job.state, failing ? [
      `last status ${failing.http_status ? `HTTP ${failing.http_status}` : failing.reason}`,
      `${failing.tries} ${failing.tries === 1 ? "try" : "tries"}`,
      labelled("last try", when(failing.last_try, AGO)),
      secondsFrom(failing.next_try) > 0 ? labelled("next try", when(failing.next_try, NEXT))
        : "next try at the watcher's next sweep",
      wide(labelled("gives up", when(failing.gives_up, AGO))),
      wide(`job ${job.status}: its receiver has not been told`),
    ] : [`callback ${job.callback}`, `job ${job.status}`]));
  }
  for (const queue of o.poison.filter((q) => q.count > 0)) {
    const newest = queue.newest[0];
    items.push(problem("poison", queue.queue, "poison messages", [
      `${queue.count} message${queue.count === 1 ? "" : "s"}`,
      newest && `newest: ${newest.reason}`,
      wide(newest && when(newest.at, AGO)),
    ]));
  }
  for (const row of o.rejected_rows) {
    items.push(problem("rejected", row.account, "rejected row", [
      `${row.file || row.location || "file"}${row.line ? ` line ${row.line}` : ""}`,
      row.reason,
      wide(`run ${row.run_id}`),
    ]));
  }
  for (const lost of o.lost_leases) {
    items.push(problem("lost", lost.key, "lease lost", [
      when(lost.at, AGO),
      lost.instance && `holder ${lost.instance}`,
      lost.function && `in ${lost.function}`,
      lost.reason,
    ]));
  }
  for (const timer of (timers || []).filter((t) => t.late)) {
    items.push(problem("late", timer.function, "timer late", [
      when(timer.next_due, DUE),
      (timer.missed || []).length ? `${timer.missed.length} missed` : "",
      timer.schedule && `schedule ${timer.schedule}`,
    ]));
  }
  const order = ["callback", "poison", "rejected", "expired", "lost", "late", "in_progress", "lock"];
  items.sort((a, b) => order.indexOf(a.dataset.kind) - order.indexOf(b.dataset.kind));
  if (o.more_held_locks || o.more_runs) {
    items.push(el("li", "problem more", "More locks or runs than shown here: see the tables below."));
  }
  if (!items.length) items.push(el("li", "problem none", "Nothing needs a person."));
  document.getElementById("problems").replaceChildren(...items);

  const runs = o.counts.runs;
  const jobs = o.counts.jobs;
  const failing = Object.entries(jobs).filter(([state]) => state.startsWith("callback")).reduce((a, [, n]) => a + n, 0);
  const chips = [
    ["lock held", "locks held", o.counts["locks held"], "held"],
    ["in progress", "in progress", runs.in_progress, "in_progress"],
    ["expired", "expired", runs.expired, "expired"],
    ["completed", "completed", runs.completed, "completed"],
    ["callback failing", "callbacks failing", failing, "failed"],
    ["poison message", "poison messages", o.counts["poison messages"], "failed"],
    ["rejected row", "rejected rows", o.counts["rejected rows"], "failed"],
    ["lease lost", "leases lost", o.lost_leases.length, "failed"],
  ];
  if (timers) chips.push(["timer late", "timers late", timers.filter((t) => t.late).length, "failed"]);
  document.getElementById("counts").replaceChildren(...chips.map(([one, many, count, tone]) => {
    const li = el("li", count ? tone : "zero");
    li.dataset.count = many;
    li.append(el("strong", "", count), el("span", "", ` ${count === 1 ? one : many}`));
    return li;
  }));
  renderHolds();
}

// -- pictures: a sparkline per figure, a hold timeline per held lock --------------------------

function svg(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  return node;
}

function sparkline(values) {
  const width = 120;
  const height = 28;
  const top = Math.max(1, ...values);
  const step = width / Math.max(1, values.length - 1);
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / top) * (height - 4)).toFixed(1)}`);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img" });
  chart.append(svg("polyline", { points: points.join(" "), fill: "none", "stroke-width": 1.5 }));
  return chart;
}

function renderCharts(charts) {
  const box = document.getElementById("charts");
  if (!charts) return;
  box.replaceChildren(...charts.series.map((figure) => {
    const total = figure.values.reduce((a, b) => a + b, 0);
    const item = el("figure", `chart ${figure.name.replace(/ /g, "_")}`);
    item.dataset.series = figure.name;
    const chart = sparkline(figure.values);
    chart.setAttribute("aria-label", `${figure.name} per 5 minutes over the last hour: ${figure.values.join(", ")}`);
    const caption = el("figcaption", "", `${figure.name} `);
    caption.append(el("strong", "", total));
    caption.title = `per ${charts.bucket_s / 60} minutes from ${absolute(charts.starts[0])}: ${figure.values.join(", ")}`;
    item.append(caption, chart);
    return item;
  }));
}

function renderHolds() {
  const box = document.getElementById("holds");
  const held = (overview ? overview.held_locks : []).filter((l) => l.since);
  if (!held.length) {
    box.replaceChildren();
    return;
  }
  const end = now();
  const start = end - 3600_000;
  const rows = held.map((lock) => {
    const row = el("div", "hold");
    row.dataset.key = lock.key;
    const from = Math.max(start, Date.parse(lock.since));
    const chart = svg("svg", { viewBox: "0 0 300 10", preserveAspectRatio: "none", class: "timeline", role: "img" });
    chart.setAttribute("aria-label", `${lock.key} held from ${absolute(lock.since)} to now`);
    chart.append(svg("rect", { x: 0, y: 4, width: 300, height: 2, class: "axis" }));
    chart.append(svg("rect", { x: ((from - start) / 3600_000) * 300, y: 1, width: Math.max(2, ((end - from) / 3600_000) * 300), height: 8, class: "bar" }));
    row.append(el("span", "key", lock.key), chart,
      when(lock.since, HELD));
    return row;
  });
  const title = el("div", "holds-title", `Locks held over the last hour (${clockTime(start)}–${clockTime(end)} UTC)`);
  box.replaceChildren(title, ...rows);
}

// -- refresh, honestly: a failure names its endpoint and the data is marked stale ---------------

function clearData() {
  overview = null;
  timers = null;
  for (const name of ["problems", "counts", "charts", "holds", "window"]) {
    document.getElementById(name).replaceChildren();
  }
  for (const name of Object.keys(views)) {
    const table = document.getElementById(name);
    table.tHead.replaceChildren();
    table.tBodies[0].replaceChildren();
    const note = document.getElementById(`${name}-note`);
    if (note) note.textContent = "";
    const nav = document.getElementById(`${name}-pager`);
    if (nav) nav.replaceChildren();
  }
  document.getElementById("namespace").textContent = "";
  document.getElementById("updated").textContent = "signed out: nothing shown";
  document.getElementById("stale").hidden = true;
  lastGood = null;
  summaryLoadedAt = 0;
}

async function loadOverview() {
  overview = await api("overview");
  if (overview.namespace) document.getElementById("namespace").textContent = `namespace ${overview.namespace}`;
}

async function loadSummary() {
  const body = await api("summary");
  summaryLoadedAt = Date.now();
  document.getElementById("window").textContent = `${absolute(body.since)} to ${absolute(body.until)}`;
  render("summary", body.figures);
  renderCharts(body.charts);
}

async function loadTimers() {
  try {
    const body = await api("timers");
    timers = body.items || [];
    document.getElementById("timers-section").hidden = false;
    render("timers", timers);
  } catch (error) {
    if (error.status === 404) {
      timersMissing = true; // this app has no timer ledger: no section, no error
      timers = null;
      document.getElementById("timers-section").hidden = true;
      return;
    }
    throw error;
  }
}

function askToSignIn(needed) {
  const form = document.getElementById("signin");
  const login = document.getElementById("login");
  if (needed.loginUrl) {
    const back = encodeURIComponent(location.pathname);
    login.href = `${needed.loginUrl}?post_login_redirect_uri=${back}`;
    login.hidden = false;
  }
  form.hidden = false;
}

let refreshing = false;
async function refresh() {
  if (refreshing) return;
  refreshing = true;
  try {
    // the overview first: the runs table's "50 of 69" takes its total from its counts
    const first = await Promise.allSettled([loadOverview()]);
    const loads = ["locks", "runs", "jobs", "imports"].map(loadTable);
    if (!timersMissing) loads.push(loadTimers());
    if (Date.now() - summaryLoadedAt >= SUMMARY_EVERY_MS) loads.push(loadSummary());
    const results = [...first, ...(await Promise.allSettled(loads))];
    const failed = results.filter((r) => r.status === "rejected").map((r) => r.reason);
    document.getElementById("signout").hidden = !sessionStorage.getItem(KEY_ITEM);
    const signIn = failed.find((e) => e instanceof SignInNeeded);
    if (signIn) {
      clearData();
      askToSignIn(signIn);
      say(`Not signed in: ${signIn.message}`, true);
      return;
    }
    document.getElementById("signin").hidden = true;
    renderProblems();
    const stale = document.getElementById("stale");
    if (failed.length) {
      const since = lastGood ? `showing data from ${clockTime(lastGood)} UTC` : "nothing loaded yet";
      stale.textContent = `Stale: ${failed.map((e) => e.message).join("; ")}. ${since}; retrying every ${refreshSeconds} s.`;
      stale.hidden = false;
      document.body.classList.add("is-stale");
    } else {
      lastGood = now();
      stale.hidden = true;
      document.body.classList.remove("is-stale");
      document.getElementById("updated").textContent =
        `updated ${clockTime(lastGood)} UTC · every ${refreshSeconds} s`;
    }
  } finally {
    refreshing = false;
    document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
  }
}

// -- actions that say what they act on and what they will cause ------------------------------

function consequence(kind, row) {
  if (kind === "locks") {
    return `Its holder${row.instance ? ` (${row.instance})` : ""} keeps running until its next renewal finds the lease gone; the next holder gets a token above ${row.token}, so fenced writes of the old holder are refused.`;
  }
  const effects = (overview && overview.reset_effects) || {};
  const effect = effects[row.scope || ""];
  if (row.state === "completed") {
    return `It ran and completed: the next trigger of this key runs it again${effect ? ` (${effect})` : ""}.`;
  }
  if (row.state === "expired") return "Its run stopped without finishing: the next delivery runs it again.";
  return `Its run may still be going: a second run can start beside it${effect ? ` (${effect})` : ""}.`;
}

async function change(kind, row, verb) {
  const itemKey = row.key;
  const where = row.scope ? `function ${row.scope}` : "the app's own key";
  const scope = row.scope ? `?scope=${encodeURIComponent(row.scope)}` : "";
  const reason = window.prompt(
    `${verb === "break" ? "Break" : "Reset"} ${itemKey} (${where}). ${consequence(kind, row)}\n` +
    `Reason to ${verb} ${itemKey} (required, kept in the audit log):`);
  if (reason === null) return;
  if (!reason.trim()) {
    say(`Not done: a reason is required to ${verb} ${itemKey}.`, true);
    return;
  }
  const response = await fetch(`${kind}/${encodeURIComponent(itemKey)}/${verb}${scope}`, {
    method: "POST", headers: { ...credentials(), "Content-Type": "application/json" },
    body: JSON.stringify({ reason }),
  }).catch((error) => ({ ok: false, status: 0, json: async () => ({ error: error.message }) }));
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    say(`Not done: ${body.error || response.status || "not allowed"}`, true);
  } else if (verb === "break") {
    say(`Broke ${itemKey} (${where}): the next holder's token will exceed ${body.token}.`, false);
  } else {
    say(`Reset ${itemKey} (${where}): it will run again on its next trigger.`, false);
  }
  await refresh();
}

document.getElementById("signin").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("operator-key");
  if (input.value.trim()) sessionStorage.setItem(KEY_ITEM, input.value.trim());
  input.value = "";
  say("", false);
  refresh();
});
document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem(KEY_ITEM);
  clearData();
  say("Signed out: the data is cleared from this page.", false);
  refresh();
});

refresh();
setInterval(refresh, refreshSeconds * 1000);
