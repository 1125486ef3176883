// Opens stock.html in headless Chromium against a running gateway, changes
// the SKU's stock through the gateway while the page is open, waits for the
// page to show each change, and takes a screenshot of each state.
//
//   node check.mjs --gateway http://127.0.0.1:8080 --sku SKU-1 --port 8099 --out DIR
//
// The page is served from http://127.0.0.1:PORT, which the gateway must
// allow (`serve --cors-origin http://127.0.0.1:PORT`). The SKU should be
// new: it is restocked to 5 with a low-stock threshold of 2, then sold one
// unit at a time (the counter follows each sale; 1 left is low stock, 0 is
// sold out) and one sale rolled back; then paused, resumed, and given a
// window that opens in an hour ("opens in…"). Prints one JSON line: what
// the page showed at each step and the screenshots taken.
import { createServer } from "node:http";
import { readFile, mkdir } from "node:fs/promises";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import puppeteer from "puppeteer-core";

function option(name, fallback) {
  const at = process.argv.indexOf("--" + name);
  if (at > 0 && at + 1 < process.argv.length) return process.argv[at + 1];
  if (fallback !== undefined) return fallback;
  console.error(`check.mjs: --${name} is required`);
  process.exit(2);
}

const gateway = option("gateway").replace(/\/$/, "");
const sku = option("sku");
const port = Number(option("port"));
const out = option("out");
const chromium = option("chromium", process.env.STOCKLEDGER_CHROMIUM || "/usr/bin/chromium");
// How long the page may take to show a change.
const WAIT_MS = Number(option("wait-ms", "30000"));
const here = dirname(fileURLToPath(import.meta.url));
const page_html = await readFile(join(option("page-dir", here), "stock.html"));

async function command(method, path, body) {
  const response = await fetch(`${gateway}${path}?wait_ms=30000`, {
    method,
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (response.status !== 200 || answer.decision?.result !== "APPLIED") {
    throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(answer)}`);
  }
}

const server = createServer((request, response) => {
  if (new URL(request.url, "http://x").pathname === "/stock.html") {
    response.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    response.end(page_html);
  } else {
    response.writeHead(404).end();
  }
});
await new Promise((done) => server.listen(port, "127.0.0.1", done));
await mkdir(out, { recursive: true });

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  // No sandbox: CI runs as root, where Chromium refuses its sandbox.
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const steps = [];
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 480, height: 420 });
  page.on("console", (m) => console.error(`page: ${m.text()}`));
  await command("POST", `/v1/skus/${sku}/restocks/first`, { mode: "SET", quantity: 5 });
  await command("PUT", `/v1/skus/${sku}/alerts`, { low_stock_below: 2 });
  const url = `http://127.0.0.1:${port}/stock.html?gateway=${encodeURIComponent(gateway)}&sku=${encodeURIComponent(sku)}`;
  await page.goto(url, { waitUntil: "domcontentloaded" });

  // Waits for the counter, the badge and the number of events listed: a
  // level can show a change before the event of the same record arrives.
  const expect = async (name, available, status, events) => {
    await page.waitForFunction(
      (a, s, n) =>
        document.body.dataset.available === a &&
        document.body.dataset.status === s &&
        document.querySelectorAll("#events li").length === n,
      { timeout: WAIT_MS },
      String(available),
      status,
      events,
    );
    await record(name);
  };
  const record = async (name) => {
    const shown = await page.evaluate(() => ({
      counter: document.getElementById("counter").textContent,
      status: document.getElementById("status").textContent,
      sale: document.getElementById("sale").hidden ? "" : document.getElementById("sale").textContent,
      events: [...document.querySelectorAll("#events li")].map((li) => li.dataset.kind),
    }));
    const screenshot = join(out, `${name}.png`);
    await page.screenshot({ path: screenshot });
    steps.push({ step: name, ...shown, screenshot });
  };
  // Waits for the sale's state and the number of events listed.
  const expectSale = async (name, sale, events) => {
    await page.waitForFunction(
      (s, n) =>
        document.body.dataset.sale === s &&
        document.querySelectorAll("#events li").length === n,
      { timeout: WAIT_MS },
      sale,
      events,
    );
    await record(name);
  };

  await expect("opened", 5, "in_stock", 0);
  // No stock event: the counter follows the level.
  await command("POST", `/v1/skus/${sku}/orders/o1/deduct`, { quantity: 1 });
  await expect("sold-one", 4, "in_stock", 0);
  await command("POST", `/v1/skus/${sku}/orders/o2/deduct`, { quantity: 2 });
  await expect("sold-three", 2, "in_stock", 0);
  await command("POST", `/v1/skus/${sku}/orders/o3/deduct`, { quantity: 1 });
  await expect("low", 1, "low_stock", 1);
  await command("POST", `/v1/skus/${sku}/orders/o4/deduct`, { quantity: 1 });
  await expect("sold-out", 0, "sold_out", 2);
  await command("POST", `/v1/skus/${sku}/orders/o4/rollback`, {});
  await expect("back", 1, "in_stock", 3);
  await command("POST", `/v1/skus/${sku}/pauses/stop`, {});
  await expectSale("paused", "paused", 4);
  await command("POST", `/v1/skus/${sku}/resumes/go`, {});
  await expectSale("resumed", "open", 5);
  const inAnHour = new Date(Date.now() + 3_600_000).toISOString();
  await command("POST", `/v1/skus/${sku}/windows/later`, { opens_at: inAnHour });
  await expectSale("opens-later", "not_open", 6);
  console.log(JSON.stringify({ steps }));
} finally {
  await browser.close();
  server.close();
}
