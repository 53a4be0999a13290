// SPDX-License-Identifier: BSD-2-Clause
// A screenshot of the profiling_ui page (ci/demo): Chromium, headless,
// driven by playwright-core (ci/install-deps installs both).
//
//   NODE_PATH=/opt/profiling-test/node/node_modules \
//       node ci/ui-screenshot.js PAGE_URL FILE.png
'use strict';

const { chromium } = require('playwright-core');

const [url, file] = process.argv.slice(2);

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox']
  });
  const page = await browser.newPage({
    viewport: { width: 1400, height: 900 }
  });
  await page.goto(url);
  await page.waitForFunction(() => window.profilingUI &&
    (window.profilingUI.ready || window.profilingUI.error), null,
    { timeout: 30000 });
  await page.screenshot({ path: file, fullPage: true });
  await browser.close();
})().catch((e) => {
  console.error(String(e));
  process.exit(1);
});
