// Runs Lighthouse (accessibility and best practices) on every page of the
// web app served at BALLET_URL, signed in with BALLET_TOKEN, in the desktop
// and the mobile form factor, and prints a Markdown table of the scores.
// run.sh starts the server and runs this; see its header.
//
// Environment: BALLET_URL, BALLET_TOKEN, CHROME_PATH (Debian's chromium),
// LIGHTHOUSE_MIN (the lowest score accepted; default 95), LIGHTHOUSE_JSON (a
// file to write every failing audit to, as JSON).
import { writeFileSync } from "node:fs";
import * as chromeLauncher from "chrome-launcher";
import lighthouse from "lighthouse";
import desktopConfig from "lighthouse/core/config/desktop-config.js";
import puppeteer from "puppeteer-core";

const base = process.env.BALLET_URL;
const token = process.env.BALLET_TOKEN;
const min = Number(process.env.LIGHTHOUSE_MIN ?? 95);
if (!base || !token) throw new Error("BALLET_URL and BALLET_TOKEN must be set");

/** api calls the REST api with the token. */
async function api(method, path, body) {
  const res = await fetch(base + "/api/v1" + path, {
    method,
    headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

/** until polls check until it returns a value, for at most a minute. */
async function until(what, check) {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 200));
  }
}

// Content for every page: a session in which the demo model answered and
// proposed a changeset (so the session, changesets, board and usage pages
// have theirs).
const session = await api("POST", "/projects/DEMO/planner/sessions", { title: "Password reset" });
await api("POST", `/planner/sessions/${session.id}/messages`, { text: "Customers keep asking for password reset. What should we plan?" });
await until("the planner's changeset", async () => {
  const s = await api("GET", `/planner/sessions/${session.id}`);
  const cs = await api("GET", "/projects/DEMO/changesets?status=proposed");
  return !s.running && cs.items.some((c) => c.session_id === session.id);
});
const board = await api("GET", "/projects/DEMO/items?kind=ticket");

const pages = [
  { name: "Sign in", path: "/", signedIn: false },
  { name: "Projects", path: "/" },
  { name: "Sessions", path: "/projects/DEMO" },
  { name: "Session", path: `/projects/DEMO/sessions/${session.id}` },
  { name: "Changesets", path: "/projects/DEMO/changesets" },
  { name: "Board", path: "/projects/DEMO/board" },
  { name: "Board, an item open", path: `/projects/DEMO/board?item=${board.items[0].key}` },
  { name: "Usage", path: "/projects/DEMO/usage" },
  { name: "Knowledge", path: "/orgs/demo/knowledge" },
];

const flags = ["--headless=new", "--disable-gpu", "--no-first-run", "--no-default-browser-check", "--disable-dev-shm-usage"];
if (process.getuid?.() === 0) flags.push("--no-sandbox");
const chrome = await chromeLauncher.launch({ chromePath: process.env.CHROME_PATH || "/usr/bin/chromium", chromeFlags: flags });
const rows = [];
const failing = [];
try {
  const browser = await puppeteer.connect({ browserURL: `http://127.0.0.1:${chrome.port}`, defaultViewport: null });
  for (const p of pages) {
    const row = { page: p.name, path: p.path.replace(session.id, "{id}") };
    for (const form of ["desktop", "mobile"]) {
      // The app keeps its token in the tab's session storage: each page
      // is opened in a tab of its own that has it from its first script.
      const started = Date.now();
      const tab = await browser.newPage();
      if (p.signedIn !== false) await tab.evaluateOnNewDocument((t) => sessionStorage.setItem("ballet.token", t), token);
      const settings = {
        onlyCategories: ["accessibility", "best-practices"],
        throttlingMethod: "provided", // no performance category: no throttling
        pauseAfterLoadMs: 1000, // the pages fill in from the api and /rpc after load
        networkQuietThresholdMs: 1000,
        logLevel: "error",
      };
      const result = await lighthouse(base + p.path, settings, form === "desktop" ? desktopConfig : undefined, tab);
      await tab.close();
      const lhr = result.lhr;
      if (lhr.runtimeError) throw new Error(`${p.name} (${form}): ${lhr.runtimeError.code} ${lhr.runtimeError.message}`);
      for (const [cat, key] of [
        ["accessibility", "a11y"],
        ["best-practices", "bp"],
      ]) {
        const c = lhr.categories[cat];
        row[`${form} ${key}`] = Math.round(c.score * 100);
        for (const ref of c.auditRefs) {
          const a = lhr.audits[ref.id];
          if (ref.weight > 0 && a.score !== null && a.score < 1) {
            failing.push({ page: p.name, form, category: cat, audit: a.id, title: a.title, items: (a.details?.items ?? []).slice(0, 5) });
          }
        }
      }
      process.stderr.write(`lighthouse: ${p.name} ${form}: accessibility ${row[`${form} a11y`]}, best practices ${row[`${form} bp`]} (${((Date.now() - started) / 1000).toFixed(1)} s)\n`);
    }
    rows.push(row);
  }
  browser.disconnect();
} finally {
  chrome.kill();
}

const cols = ["desktop a11y", "desktop bp", "mobile a11y", "mobile bp"];
console.log("| Page | Path | Desktop accessibility | Desktop best practices | Mobile accessibility | Mobile best practices |");
console.log("| --- | --- | ---: | ---: | ---: | ---: |");
for (const r of rows) console.log(`| ${r.page} | \`${r.path}\` | ${cols.map((c) => r[c]).join(" | ")} |`);
for (const f of failing) console.error(`lighthouse: ${f.page} (${f.form}) ${f.category}: ${f.audit}: ${f.title}`);
if (process.env.LIGHTHOUSE_JSON) writeFileSync(process.env.LIGHTHOUSE_JSON, JSON.stringify(failing, null, 2));
const low = rows.filter((r) => cols.some((c) => r[c] < min));
if (low.length > 0) {
  console.error(`lighthouse: below ${min}: ${low.map((r) => r.page).join(", ")}`);
  process.exit(1);
}
