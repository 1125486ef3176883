// Opens the console in headless Chromium as a browser user would (a
// user name and the API key as its password, pasted into the URL as
// `http://user:key@host/console`), waits until it shows every
// watched SKU and the pipeline, and prints what it shows as one JSON line,
// with a screenshot. Then, for each line read on stdin (the test has cut a
// service off meanwhile), waits until the page shows the outage it names,
// and prints and shoots the page again.
//
//   node check.mjs --url http://127.0.0.1:8080/console?sku=A --user ops \
//     --key slk_… --out DIR [--chromium PATH]
//
// stdin: `redis` waits for Redis shown as not answering, `stall` for a
// partition shown without a decision while commands wait.
import { createInterface } from "node:readline";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import puppeteer from "puppeteer-core";

function option(name, fallback) {
  const at = process.argv.indexOf("--" + name);
  if (at > 0 && at + 1 < process.argv.length) return process.argv[at + 1];
  if (fallback !== undefined) return fallback;
  console.error(`check.mjs: --${name} is required`);
  process.exit(2);
}

const url = option("url");
const out = option("out");
const chromium = option("chromium", process.env.STOCKLEDGER_CHROMIUM || "/usr/bin/chromium");
const WAIT_MS = Number(option("wait-ms", "60000"));
await mkdir(out, { recursive: true });

// What the page shows, read from its elements (never from its data).
function shown() {
  const cells = (row) => [...row.querySelectorAll("td")].map((td) => td.textContent);
  const skus = {};
  for (const box of document.querySelectorAll("[data-sku]")) {
    const d = box.dataset;
    const figures = [...box.querySelectorAll(".figure")].map((f) => [f.querySelector("span").textContent, f.querySelector("b").textContent]);
    skus[d.sku] = {
      stock: d.stock,
      figures: Object.fromEntries(figures),
      taken: d.taken ?? null,
      locations: Object.fromEntries([...box.querySelectorAll("[data-location]")].map((r) => [r.dataset.location, cells(r)[1]])),
      seats: Object.fromEntries([...box.querySelectorAll("[data-seat]")].map((s) => [s.dataset.seat, s.className.replace("seat ", "")])),
      moments: [...box.querySelectorAll("line[data-kind]")].map((l) => l.dataset.kind),
      text: box.textContent,
    };
  }
  const table = (id) => [...document.querySelectorAll(`#${id} tr[data-partition]`)].map((r) => ({ partition: r.dataset.partition, lag: cells(r)[1] }));
  return {
    state: document.body.dataset.state,
    checked_at: document.body.dataset.checkedAt ?? null,
    services: Object.fromEntries([...document.querySelectorAll("[data-service]")].map((r) => [r.dataset.service, r.dataset.reachable === "true"])),
    outage: [document.getElementById("pipeline-outage").textContent, document.getElementById("sale-outage").textContent],
    skus,
    applier: table("applier"),
    archiver: table("archiver"),
    decisions: Object.fromEntries([...document.querySelectorAll("#decisions tr[data-result]")].map((r) => [r.dataset.result, cells(r)[2]])),
    dead_letters: document.getElementById("dead-letters").textContent,
    newest_dead_letters: [...document.querySelectorAll("#newest-dead-letters li")].map((li) => li.textContent),
    holds_overdue: document.getElementById("holds-overdue").textContent,
  };
}

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  // No sandbox: CI runs as root, where Chromium refuses its sandbox.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  page.on("console", (m) => console.error(`page: ${m.text()}`));
  // As a person pastes it: the credentials in the URL, so the page's own
  // address holds them too (fetch refuses a URL with credentials).
  const pasted = new URL(url);
  pasted.username = option("user");
  pasted.password = option("key");
  await page.authenticate({ username: option("user"), password: option("key") });
  const response = await page.goto(pasted.href, { waitUntil: "domcontentloaded" });
  if (response.status() !== 200) throw new Error(`${url}: ${response.status()}`);
  const report = async (name) => {
    const screenshot = join(out, `${name}.png`);
    await page.screenshot({ path: screenshot, fullPage: true });
    console.log(JSON.stringify({ step: name, screenshot, ...(await page.evaluate(shown)) }));
  };
  // Every watched SKU's stock and sales known, and the pipeline read.
  await page.waitForFunction(() => {
    const boxes = [...document.querySelectorAll("[data-sku]")];
    return document.body.dataset.checkedAt && boxes.length > 0 &&
      boxes.every((b) => b.dataset.stock === "known" && b.dataset.taken !== undefined);
  }, { timeout: WAIT_MS });
  await report("console");
  // What each outage looks like once the page shows it.
  const shows = {
    redis: () =>
      document.querySelector("[data-service=redis]")?.dataset.reachable === "false" &&
      [...document.querySelectorAll("[data-sku]")].every((b) => b.dataset.stock === "unknown"),
    stall: () => document.getElementById("pipeline-outage").textContent.includes("no decision for"),
  };
  for await (const line of createInterface({ input: process.stdin })) {
    const outage = line.trim();
    if (!shows[outage]) throw new Error(`unknown outage ${outage}`);
    await page.waitForFunction(shows[outage], { timeout: WAIT_MS });
    await report(`console-${outage}`);
  }
} finally {
  await browser.close();
}
