// The dpsql console: every value from the service is shown with textContent, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("dpsql-token") || "";

async function call(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: Object.assign({ Authorization: "Bearer " + token },
                           body === undefined ? {} : { "Content-Type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({ error: "HTTP " + response.status }));
  if (!response.ok) throw new Error(data.error || "HTTP " + response.status);
  return data;
}

function show(error) { $("error").textContent = error ? String(error.message || error) : ""; }

function number(x) {
  if (x === null || x === undefined) return "-";
  if (typeof x !== "number") return String(x);
  return Math.abs(x) >= 1e6 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : String(+x.toPrecision(6));
}

function fillTable(table, headers, rows) {
  const head = table.querySelector("thead");
  const body = table.querySelector("tbody");
  if (head) {
    head.replaceChildren();
    const tr = head.insertRow();
    for (const h of headers) { const th = document.createElement("th"); th.textContent = h; tr.appendChild(th); }
  }
  body.replaceChildren();
  for (const row of rows) {
    const tr = body.insertRow();
    for (const value of row) { tr.insertCell().textContent = value; }
  }
}

function bar(fill, text, status, label) {
  const share = status.total > 0 ? Math.min(1, status.spent_ip / status.total) : 1;
  fill.style.width = (100 * share).toFixed(2) + "%";
  fill.dataset.share = share.toFixed(6);
  text.textContent = label + ": level " + number(status.spent_ip) + " of " + number(status.total) +
    "; largest epsilon a COUNT(*) can still ask " + number(status.largest_epsilon);
}

async function refreshBudget() {
  const b = await call("GET", "/v1/budget");
  $("who").textContent = b.analyst + " (" + b.role + ")";
  bar($("budget-fill"), $("budget-text"), b.global, "global budget");
  $("cap-bar").hidden = b.cap === null;
  if (b.cap !== null) bar($("cap-fill"), $("cap-text"), b.cap, "your cap");
  else $("cap-text").textContent = "";
  return b;
}

function ask() {
  const body = { sql: $("sql").value };
  const epsilon = $("epsilon").value.trim();
  if (epsilon !== "") body.epsilon = Number(epsilon);
  return body;
}

// Each output's own expected 95% error (an AVG's is not its SUM's): explain's `errors`.
function expectedErrors(e) {
  if (!e.errors || e.errors.length === 0) return "none (no noisy column)";
  return e.errors.map((x) => {
    if (x.halfwidth !== null) return x.column + " ±" + number(x.halfwidth);
    if (x.sum_error !== null && x.count_error !== null) {
      return x.column + " ±(" + number(x.sum_error) + " + |mean|·" + number(x.count_error) +
        ") / (n − " + number(x.count_error) + ") over n rows";
    }
    return x.column + ": depends on the data (the answer gives its interval)";
  }).join(", ");
}

async function explain() {
  show(null);
  try {
    const e = await call("POST", "/v1/explain", ask());
    $("cost").textContent = "cost " + number(e.cost) + ": level " + number(e.level_before) + " -> " +
      number(e.level_after) + " of " + number(e.budget.total) + (e.admissible ? " (admissible)" : " (would be refused)") +
      "; expected 95% error " + expectedErrors(e);
  } catch (error) { show(error); }
}

async function run() {
  show(null);
  try {
    const r = await call("POST", "/v1/query", ask());
    $("result-sql").textContent = r.sql;
    const intervals = r.selection_adjusted ? r.ci95 : r.ci95_simultaneous;
    fillTable($("result"), r.columns, r.rows.map((row, i) => row.map((v, j) =>
      intervals[i][j] === null ? number(v) : number(v) + " ± " + number(intervals[i][j]))));
    $("result-note").textContent = "epsilon " + number(r.epsilon) + " (epsilon_dp " + number(r.epsilon_dp) +
      ", " + r.mode + "); cost " + number(r.cost);
    await refreshBudget();
  } catch (error) { show(error); }
}

async function loadReport() {
  const r = await call("GET", "/v1/report");
  fillTable($("report-totals"), [], Object.entries(r.totals).map(([k, v]) => [k, number(v)]));
  fillTable($("report-analysts"), ["analyst", "answers", "spent_dp", "own level"],
            r.analysts.map((a) => [a.analyst, number(a.answers), number(a.spent_dp), number(a.own_level)]));
  fillTable($("report-entries"), ["id", "time", "analyst", "sql", "epsilon", "epsilon_dp", "transcript level"],
            r.entries.map((e) => [e.id, e.time, e.analyst, e.sql, number(e.epsilon), number(e.epsilon_dp),
                                  number(e.transcript_level)]));
}

async function signIn() {
  show(null);
  token = $("token").value.trim() || token;
  try {
    const b = await refreshBudget();
    sessionStorage.setItem("dpsql-token", token);
    $("signin").hidden = true;
    $("budget").hidden = false;
    $("console").hidden = b.role !== "analyst";
    $("report").hidden = b.role !== "accountant";
    if (b.role === "accountant") await loadReport();
  } catch (error) { show(error); }
}

$("signin-button").addEventListener("click", signIn);
$("explain-button").addEventListener("click", explain);
$("query-button").addEventListener("click", run);
if (token) signIn();
