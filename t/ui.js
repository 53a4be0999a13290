// SPDX-License-Identifier: BSD-2-Clause
// t/ui.t's browser: drives the profiling_ui page in Chromium (headless,
// playwright-core) and prints what it saw as one JSON line, for t/ui.t to
// judge: each view's frames and their widths, a zoom, a search, the
// filters' views, the download link, the time a page of many stacks took.
//
//   node t/ui.js PAGE_URL OUT_DIR SPAN_ID FUNCTION TRACE_ID ENDPOINT
'use strict';

const { chromium } = require('playwright-core');

const [pageUrl, outDir, spanId, fn, traceId, endpoint] =
  process.argv.slice(2);

async function ready(page) {
  await page.waitForFunction(() => window.profilingUI &&
    (window.profilingUI.ready || window.profilingUI.error), null,
    { timeout: 30000 });
  return page.evaluate(() => window.profilingUI.error);
}

// Each drawn frame's name and width (a share of the graph's width), and
// the share of the outermost frames named name.
async function frames(page, name) {
  return page.evaluate((name) => {
    const ui = window.profilingUI;
    const out = { names: [], share: 0, total: ui.total };
    const seen = new Set();
    for (const r of ui.rects) {
      seen.add(r.name);
      if (r.name === name && !r.ancestor) {
        let nested = false;
        for (let n = r.node.parent; n; n = n.parent) {
          if (n.name === name) {
            nested = true;
          }
        }
        if (!nested) {
          out.share += r.w / ui.width;
        }
      }
    }
    out.names = Array.from(seen);
    return out;
  }, name);
}

(async () => {
  const result = {};
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox']
  });
  const page = await browser.newPage({
    viewport: { width: 1400, height: 900 }
  });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error') {
      errors.push(m.text());
    }
  });

  // The whole window, CPU: the function's width.
  const all = pageUrl + '?window=900&type=cpu';
  await page.goto(all);
  result.error = await ready(page);
  result.all = await frames(page, fn);
  result.download = await page.$eval('#download', (a) => a.href);
  result.permalink = await page.$eval('#permalink', (a) => a.href);
  result.summary = await page.$eval('#summary', (p) => p.textContent);
  result.workers = await page.$$eval('#worker option', (o) =>
    o.map((x) => x.value));
  result.endpoints = await page.$$eval('#endpoint option', (o) =>
    o.map((x) => x.value));
  await page.screenshot({ path: outDir + '/ui.png', fullPage: true });

  // A click on the function's frame zooms into it.
  const target = await page.evaluate((name) => {
    const ui = window.profilingUI;
    const r = ui.rects.find((x) => x.name === name && !x.ancestor);
    const box = document.getElementById('flame').getBoundingClientRect();
    return r ? { x: box.left + r.x + r.w / 2, y: box.top + r.y + 9 } : null;
  }, fn);
  if (target) {
    await page.mouse.click(target.x, target.y);
    result.zoom = await page.evaluate(() => {
      const ui = window.profilingUI;
      const z = ui.rects.find((r) => ui.zoom && r.node === ui.zoom);
      return { name: ui.zoom && ui.zoom.name,
               width: z ? z.w / ui.width : 0,
               crumbs: document.getElementById('crumbs').textContent };
    });
    await page.screenshot({ path: outDir + '/ui-zoom.png', fullPage: true });

    // The zoom is in the link: opened again, the page zooms there.
    result.zoom.url = page.url();
    await page.goto(page.url());
    await ready(page);
    result.zoom.again = await page.evaluate(() =>
      window.profilingUI.zoom && window.profilingUI.zoom.name);
  }

  // A search highlights: its share, and frames marked.
  await page.click('#reset');
  await page.fill('#search', fn.replace(/^ngx_http_/, ''));
  result.search = await page.evaluate(() => {
    const ui = window.profilingUI;
    return { share: ui.matchedShare,
             marked: ui.rects.filter((r) => r.matched).length,
             text: document.getElementById('matched').textContent,
             url: location.href };
  });
  await page.screenshot({ path: outDir + '/ui-search.png', fullPage: true });

  // One request's code: its span id.
  await page.goto(pageUrl + '?window=900&span_id=' + spanId);
  await ready(page);
  result.span = await frames(page, fn);

  // The other filters from the labels: the trace, the endpoint, stalls.
  await page.goto(pageUrl + '?window=900&trace_id=' + traceId);
  await ready(page);
  result.trace = await frames(page, fn);
  await page.goto(pageUrl + '?window=900&endpoint=' +
                  encodeURIComponent(endpoint));
  await ready(page);
  result.endpoint = await frames(page, fn);
  result.endpointChosen = await page.$eval('#endpoint', (s) => s.value);
  await page.goto(pageUrl + '?window=900&stalls=1');
  await ready(page);
  result.stalls = await frames(page, fn);
  await page.goto(pageUrl + '?window=900&type=off');
  await ready(page);
  result.off = await page.evaluate(() => window.profilingUI.total);

  // Lua-land: frames from the Lua entry point, and CPU by Lua file.
  await page.goto(pageUrl + '?window=900&view=lua');
  await ready(page);
  result.lua = await frames(page, fn);
  result.luaFiles = await page.$$eval('#luafiles tbody tr', (rows) =>
    rows.map((r) => Array.from(r.cells).map((c) => c.textContent)));
  await page.screenshot({ path: outDir + '/ui-lua.png', fullPage: true });

  // Each sample type, and a comparison with the window before.
  await page.goto(pageUrl + '?window=60&type=wall&compare=1');
  await ready(page);
  result.wall = await page.evaluate(() => window.profilingUI.total);
  result.compared = await page.evaluate(() =>
    window.profilingUI.base !== null &&
    /compared with the window before/.test(
      document.getElementById('summary').textContent));

  // Many distinct stacks: the page's own data replaced by 10,000 of them.
  const n = 10000;
  const names = [];
  for (let i = 0; i < 400; i++) {
    names.push(['function_' + i, '', 0, 0]);
  }
  const stacks = [];
  for (let i = 0; i < n; i++) {
    const depth = 8 + i % 24;
    const s = [];
    let x = i * 2654435761 >>> 0;
    for (let d = 0; d < depth; d++) {
      x = (x * 1103515245 + 12345) >>> 0;
      s.push(d < 3 ? d : x % 400);
    }
    stacks.push([s.reverse(), 1000000 + i, 2000000, 1000000]);
  }
  const big = JSON.stringify({ from_ms: Date.now() - 60000, to_ms: Date.now(),
    profiles: 1, stall_samples: 0, totals: [1, 1, 1], workers: [],
    endpoints: [], frames: names, stacks: stacks });
  await page.route((url) => url.search.includes('data=1'), (route) =>
    route.fulfill({ status: 200, contentType: 'application/json',
                    body: big }));
  const t0 = Date.now();
  await page.goto(pageUrl + '?window=last');
  await ready(page);
  result.many = await page.evaluate(() => ({
    render_ms: window.profilingUI.renderMs,
    load_ms: window.profilingUI.loadMs,
    rects: window.profilingUI.rects.length }));
  result.many.page_ms = Date.now() - t0;
  result.many.stacks = n;
  await page.screenshot({ path: outDir + '/ui-10000.png' });

  result.errors = errors;
  await browser.close();
  process.stdout.write(JSON.stringify(result) + '\n');
})().catch((e) => {
  process.stdout.write(JSON.stringify({ fatal: String(e.stack || e) }) + '\n');
  process.exit(1);
});
