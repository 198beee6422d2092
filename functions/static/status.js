// The status page's script: served as a file, the page allows no inline script.
"use strict";
const params = new URLSearchParams(location.search);
const refreshSeconds = Math.max(2, Number(params.get("refresh")) || 5);
const KEY_ITEM = "ops-operator-key";
// The last hour's figures are read from the stores (a listing of each): once a minute.
const SUMMARY_EVERY_MS = 60_000;
let summaryLoadedAt = 0;

function credentials() {
  const key = sessionStorage.getItem(KEY_ITEM);
  return key ? { "X-Operator-Key": key } : {};
}

const views = {
  locks: {
    url: "locks", columns: [["key", "Key"], ["held", "State"], ["token", "Token"],
      ["instance", "Instance"], ["function", "Function"], ["since", "Since"],
      ["waiting", "Waiting"]],
    state: (row) => (row.held ? "held" : "free"),
    action: (row) => row.held && ["Break", () => change("locks", row, "break")],
  },
  runs: {
    url: "runs", columns: [["key", "Key"], ["scope", "Function"], ["state", "State"],
      ["attempt", "Attempt"], ["owner", "Owner"], ["started", "Started"],
      ["expires", "Expires"]],
    state: (row) => row.state,
    action: (row) => ["Reset", () => change("runs", row, "reset")],
  },
  jobs: {
    url: "jobs", columns: [["job_id", "Job"], ["status", "State"], ["units_done", "Done"],
      ["units_failed", "Failed"], ["units_outstanding", "Outstanding"], ["total", "Total"],
      ["callback", "Callback"]],
    state: (row) => row.status,
  },
  imports: {
    url: "imports", columns: [["account", "Account"], ["status", "State"], ["run_id", "Run"],
      ["instance", "Instance"], ["imported", "Imported"], ["rejected", "Rejected"],
      ["duration_s", "Seconds"], ["errors", "Errors"]],
    state: (row) => row.status,
  },
  summary: {
    url: "summary", columns: [["section", "Flow"], ["figure", "Figure"], ["value", "Count"],
      ["source", "Read from"]],
    key: (row) => row.figure,
    missing: "not stored",
  },
};

function say(text, isError) {
  const box = document.getElementById("message");
  box.textContent = text;
  box.className = isError ? "error" : "";
}

function shown(value) {
  if (value === null || value === undefined || value === "") return "–";
  if (typeof value === "boolean") return value ? "yes" : "no";
  const time = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)[.\d]*(\+00:00|Z)$/.exec(value);
  return time ? `${time[1]} ${time[2]} UTC` : String(value);
}

function render(name, items) {
  const view = views[name];
  const table = document.getElementById(name);
  const head = document.createElement("tr");
  for (const [, label] of view.columns) {
    const th = document.createElement("th");
    th.textContent = label;
    head.append(th);
  }
  if (view.action) head.append(document.createElement("th"));
  table.tHead.replaceChildren(head);
  const rows = items.map((item) => {
    const tr = document.createElement("tr");
    tr.dataset.key = view.key ? view.key(item) : item.key || item.job_id || item.account || "";
    for (const [field, label] of view.columns) {
      const td = document.createElement("td");
      td.dataset.label = label;
      const isState = label === "State";
      const missing = view.missing && (item[field] === null || item[field] === undefined);
      td.textContent = isState ? view.state(item) : missing ? view.missing : shown(item[field]);
      if (missing) td.className = "empty";
      if (isState) td.className = view.state(item);
      tr.append(td);
    }
    const action = view.action && view.action(item);
    if (view.action) {
      const td = document.createElement("td");
      td.dataset.label = "";
      if (action) {
        const button = document.createElement("button");
        button.textContent = action[0];
        button.addEventListener("click", action[1]);
        td.append(button);
      }
      tr.append(td);
    }
    return tr;
  });
  if (!rows.length) {
    const tr = document.createElement("tr");
    const td = document.createElement("td");
    td.colSpan = view.columns.length + 1;
    td.className = "empty";
    td.textContent = "none";
    tr.append(td);
    rows.push(tr);
  }
  table.tBodies[0].replaceChildren(...rows);
}

class SignInNeeded extends Error {
  constructor(message, loginUrl) {
    super(message);
    this.loginUrl = loginUrl;
  }
}

async function load(name) {
  const response = await fetch(`${views[name].url}?limit=50`, { headers: credentials() });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) throw new SignInNeeded(body.error || "sign in", body.login_url);
  if (!response.ok) throw new Error(`${name}: ${response.status} ${body.error || ""}`);
  if (body.namespace) document.getElementById("namespace").textContent = `namespace ${body.namespace}`;
  if (name === "summary") {
    summaryLoadedAt = Date.now();
    document.getElementById("window").textContent = `${shown(body.since)} to ${shown(body.until)}`;
  }
  render(name, body.items || body.figures);
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

async function refresh() {
  const due = Object.keys(views).filter(
    (name) => name !== "summary" || Date.now() - summaryLoadedAt >= SUMMARY_EVERY_MS);
  const results = await Promise.allSettled(due.map(load));
  const failed = results.filter((r) => r.status === "rejected").map((r) => r.reason);
  document.getElementById("updated").textContent =
    `updated ${new Date().toLocaleTimeString()} · every ${refreshSeconds} s`;
  document.getElementById("signout").hidden = !sessionStorage.getItem(KEY_ITEM);
  const signIn = failed.find((e) => e instanceof SignInNeeded);
  if (signIn) {
    askToSignIn(signIn);
    say(`Not signed in: ${signIn.message}`, true);
  } else if (failed.length) {
    say(failed.map((e) => e.message).join("; "), true);
  } else {
    document.getElementById("signin").hidden = true;
  }
}

async function change(kind, row, verb) {
  const itemKey = row.key;
  const scope = row.scope ? `?scope=${encodeURIComponent(row.scope)}` : "";
  const reason = window.prompt(`Reason to ${verb} ${itemKey} (required, kept in the audit log):`);
  if (reason === null) return;
  if (!reason.trim()) {
    say(`Not done: a reason is required to ${verb} ${itemKey}.`, true);
    return;
  }
  const response = await fetch(`${kind}/${encodeURIComponent(itemKey)}/${verb}${scope}`, {
    method: "POST", headers: { ...credentials(), "Content-Type": "application/json" },
    body: JSON.stringify({ reason }),
  });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401 || response.status === 403) {
    say(`Not done: ${body.error || "not allowed"}`, true);
  } else if (!response.ok) {
    say(`Not done: ${body.error || response.status}`, true);
  } else if (verb === "break") {
    say(`Broke ${itemKey}: the next holder's token will exceed ${body.token}.`, false);
  } else {
    say(`Reset ${itemKey}: it will run again on its next trigger.`, false);
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
  refresh();
});

refresh();
setInterval(refresh, refreshSeconds * 1000);
