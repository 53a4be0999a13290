// SPDX-License-Identifier: BSD-2-Clause
// Pyroscope's Node.js SDK (@pyroscope/nodejs), as it is, pushing to the
// address given: CPU spun in short slices for SECONDS, then stopped (its
// last profiles flushed). For t/pyroscope-sdk.t.
//
//   NODE_PATH=.../node_modules node t/pyroscope-sdk.js URL SECONDS

'use strict';

const Pyroscope = require('@pyroscope/nodejs');

const [server, seconds] = process.argv.slice(2);

Pyroscope.init({
  serverAddress: server,
  appName: 'sdk-check',
  tags: { region: 'eu-west' },
  flushIntervalMs: 1000,
});
Pyroscope.start();

const end = Date.now() + Number(seconds) * 1000;
let sink = 0;

function spin() {
  const stop = Date.now() + 20;
  while (Date.now() < stop) {
    sink += Math.sqrt(sink + 1);
  }
  if (Date.now() < end) {
    setImmediate(spin);
  } else {
    Pyroscope.stop().then(() => process.exit(sink > 0 ? 0 : 1));
  }
}

spin();
