#!/usr/bin/env node
// End-to-end check of the chat page served by `peregrine serve` at `/`.
//
// Usage: node scripts/chat_page_check.mjs BASE_URL OUT_DIR
//   e.g. node scripts/chat_page_check.mjs http://127.0.0.1:8000 /tmp/out
//
// Drives Debian's Chromium (override with $CHROMIUM) through playwright-core:
// loads the page, waits for the model list, sends one prompt, waits for the
// streamed answer, saves OUT_DIR/chat_page.png and prints the answer.
// Exits non-zero on any failure, including console errors on the page.
// $PEREGRINE_API_KEY, when set, is entered as the page's API key.
//
// playwright-core is looked up next to this script, then in the current
// directory, then in each $NODE_PATH entry, so CI can install it anywhere with
// `npm install --no-save playwright-core` and run this from that directory.

import { createRequire } from "node:module";
import { mkdirSync } from "node:fs";
import path from "node:path";

const PROMPT = "Write one short sentence about falcons.";
const ANSWER_TIMEOUT_MS = 120_000;
const LOAD_TIMEOUT_MS = 30_000;

function fail(msg) {
  console.error(`chat_page_check: FAIL: ${msg}`);
  process.exit(1);
}

function loadPlaywright() {
  const bases = [import.meta.url, path.join(process.cwd(), "noop.js")];
  for (const dir of (process.env.NODE_PATH || "").split(path.delimiter)) {
    if (dir) bases.push(path.join(dir, "noop.js"));
  }
  for (const base of bases) {
    try {
      return createRequire(base)("playwright-core");
    } catch (_) { /* try the next location */ }
  }
  fail("cannot find the npm package playwright-core; run `npm install --no-save playwright-core` " +
       "in this directory or point NODE_PATH at its node_modules");
}

const [baseUrl, outDir] = process.argv.slice(2);
if (!baseUrl || !outDir) fail("usage: node chat_page_check.mjs BASE_URL OUT_DIR");
mkdirSync(outDir, { recursive: true });
const shot = path.join(outDir, "chat_page.png");

const { chromium } = loadPlaywright();
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
}).catch((e) => fail(`cannot launch Chromium: ${e.message}`));

const consoleErrors = [];
let failure = null;
let answer = "";
let stats = "";
try {
  const page = await browser.newPage({ viewport: { width: 1100, height: 760 } });
  // A server started with --api-key: the page reads the key the user typed from localStorage.
  if (process.env.PEREGRINE_API_KEY) {
    await page.addInitScript((key) => localStorage.setItem("peregrine.apiKey", key), process.env.PEREGRINE_API_KEY);
  }
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(`uncaught: ${e.message}`));

  const url = new URL("/", baseUrl).href;
  const res = await page.goto(url, { waitUntil: "load", timeout: LOAD_TIMEOUT_MS });
  if (!res || !res.ok()) throw new Error(`GET ${url} returned ${res ? res.status() : "no response"}`);

  // The page lists models, then goes idle (or shows an error bubble).
  await page.waitForFunction(() => document.body.dataset.state === "idle", null,
                             { timeout: LOAD_TIMEOUT_MS });
  const model = await page.$eval("#model", (s) => s.value);
  const loadError = await page.$$eval(".msg.error", (els) => els.map((e) => e.textContent).join("; "));
  if (loadError) throw new Error(`page shows an error after loading: ${loadError}`);
  if (!model) throw new Error("no model selected after loading /v1/models");
  console.log(`model: ${model}`);

  await page.fill("#prompt", PROMPT);
  await page.click("#send");
  const t0 = Date.now();
  await page.waitForFunction(() => {
    if (document.body.dataset.state !== "idle") return false;
    if (document.querySelector(".msg.error")) return true;
    const bubbles = document.querySelectorAll(".msg.assistant");
    return bubbles.length > 0 && bubbles[bubbles.length - 1].textContent.trim() !== "";
  }, null, { timeout: ANSWER_TIMEOUT_MS, polling: 100 }).catch((e) => {
    throw new Error(`no complete answer within ${ANSWER_TIMEOUT_MS / 1000} s (${e.message.split("\n")[0]})`);
  });
  const elapsed = ((Date.now() - t0) / 1000).toFixed(1);

  const chatError = await page.$$eval(".msg.error", (els) => els.map((e) => e.textContent).join("; "));
  if (chatError) throw new Error(`page shows an error: ${chatError}`);
  answer = await page.$$eval(".msg.assistant", (els) => els[els.length - 1].textContent.trim());
  stats = await page.$$eval(".meta", (els) => (els.length ? els[els.length - 1].textContent : ""));
  console.log(`answer (${elapsed} s): ${answer}`);
  if (stats) console.log(`stats: ${stats}`);

  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot: ${shot}`);
} catch (e) {
  failure = e.message;
  // Best effort: keep a picture of the failed state for debugging.
  const pages = browser.contexts().flatMap((c) => c.pages());
  if (pages.length) await pages[0].screenshot({ path: shot, fullPage: true }).catch(() => {});
} finally {
  await browser.close().catch(() => {});
}

if (failure) fail(failure);
if (consoleErrors.length) fail(`console errors on the page:\n  ${consoleErrors.join("\n  ")}`);
if (!/\d+ tokens/.test(stats) || stats.includes("no usage reported")) {
  fail(`no usage under the answer (got "${stats}"); the server must send a usage chunk ` +
       "when stream_options.include_usage is true");
}
console.log("chat_page_check: OK");
