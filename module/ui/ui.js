// SPDX-License-Identifier: BSD-2-Clause
// profiling_ui: draws the flame graph of the data the same location
// serves (?data=1&filters), and its tables; every view is a link.
'use strict';

(function () {
  const TYPES = { cpu: 0, wall: 1, off: 2 };
  const SERVER_FILTERS = ['worker', 'window', 'endpoint', 'trace_id',
                          'span_id', 'stalls'];
  const ROW = 18;
  const $ = (id) => document.getElementById(id);

  const ui = {
    ready: false, error: null, data: null, base: null, root: null,
    zoom: null, rects: [], renderMs: 0, matchedShare: 0, total: 0
  };
  window.profilingUI = ui;

  // The view's state: the query string, with the page's defaults.
  function readState() {
    const q = new URLSearchParams(location.search);
    return {
      type: q.get('type') || 'cpu',
      worker: q.get('worker') || 'all',
      window: q.get('window') || 'last',
      endpoint: q.get('endpoint') || '',
      trace_id: q.get('trace_id') || '',
      span_id: q.get('span_id') || '',
      stalls: q.get('stalls') === '1' ? '1' : '',
      view: q.get('view') || 'all',
      compare: q.get('compare') === '1' ? '1' : '',
      search: q.get('search') || '',
      zoom: q.get('zoom') || ''
    };
  }

  let state = readState();

  function query(keys, extra) {
    const q = new URLSearchParams();
    for (const k of keys) {
      if (state[k] !== '' && state[k] !== undefined) {
        q.set(k, state[k]);
      }
    }
    for (const k in (extra || {})) {
      q.set(k, extra[k]);
    }
    return q.toString();
  }

  function pageQuery() {
    return query(['type', 'worker', 'window', 'endpoint', 'trace_id',
                  'span_id', 'stalls', 'view', 'compare', 'search', 'zoom']);
  }

  function setOptions(select, values, labels, current) {
    const keep = Array.from(select.options).filter((o) => o.dataset.fixed);
    select.textContent = '';
    for (const o of keep) {
      select.appendChild(o);
    }
    values.forEach((v, i) => {
      const o = document.createElement('option');
      o.value = v;
      o.textContent = labels[i];
      select.appendChild(o);
    });
    if (current !== '' && !values.includes(current) &&
        !keep.some((o) => o.value === current)) {
      const o = document.createElement('option');
      o.value = current;
      o.textContent = current;
      select.appendChild(o);
    }
    select.value = current;
  }

  function showState() {
    for (const k of ['type', 'window', 'view', 'compare']) {
      $(k).value = state[k];
    }
    for (const k of ['trace_id', 'span_id', 'search']) {
      $(k).value = state[k];
    }
    $('stalls').checked = state.stalls === '1';
    const link = location.pathname + '?' + pageQuery();
    $('permalink').href = link;
    // The download: the periods shown, whatever closed since.
    $('download').href = location.pathname + '?' +
      query(SERVER_FILTERS.concat(['type']),
            ui.data ? { pprof: '1', at: ui.data.at_ms } : { pprof: '1' });
    history.replaceState(null, '', link);
  }

  function takeForm() {
    for (const k of ['type', 'worker', 'window', 'endpoint', 'view',
                     'compare']) {
      state[k] = $(k).value;
    }
    for (const k of ['trace_id', 'span_id', 'search']) {
      state[k] = $(k).value.trim();
    }
    state.stalls = $('stalls').checked ? '1' : '';
  }

  // A stack's frames, root first, as the view shows them (Lua-land: from
  // the Lua entry point's frame under the outermost Lua function).
  function viewFrames(frames, data) {
    const f = frames.slice().reverse();
    if (state.view !== 'lua') {
      return f;
    }
    let top = -1;
    for (let i = 0; i < f.length; i++) {
      if (data.frames[f[i]][3]) {
        top = i;
        break;
      }
    }
    if (top < 0) {
      return null;
    }
    if (top > 0 && data.frames[f[top - 1]][0].startsWith('ngx_http_lua_')) {
      top--;
    }
    return f.slice(top);
  }

  function frameLabel(data, id) {
    const f = data.frames[id];
    return f[3] && f[1] && !/:\d+$/.test(f[0])
      ? f[0] + ' (' + f[1] + ':' + f[2] + ')' : f[0];
  }

  // The tree: nodes { id, name, total, self, kids: Map, parent }.
  function buildTree(data, vi) {
    const root = { id: -1, name: 'all', total: 0, self: 0,
                   kids: new Map(), parent: null };
    for (const s of data.stacks) {
      const value = s[1 + vi];
      if (!(value > 0)) {
        continue;
      }
      const frames = viewFrames(s[0], data);
      if (frames === null) {
        continue;
      }
      let node = root;
      node.total += value;
      for (const id of frames) {
        let kid = node.kids.get(id);
        if (kid === undefined) {
          kid = { id: id, name: frameLabel(data, id), total: 0, self: 0,
                  kids: new Map(), parent: node };
          node.kids.set(id, kid);
        }
        kid.total += value;
        node = kid;
      }
      node.self += value;
    }
    return root;
  }

  // The zoom in the link: the frames' names from the root, one after the
  // other (U+001F between them).
  function zoomTo(node) {
    ui.zoom = node;
    state.zoom = node && node.parent ? pathOf(node).split('\u0000')
      .join('\u001f') : '';
    showState();
    draw();
  }

  function findPath(root, path) {
    let node = root;
    for (const name of path.split('\u001f')) {
      let next = null;
      for (const k of node.kids.values()) {
        if (k.name === name) {
          next = k;
          break;
        }
      }
      if (next === null) {
        return null;
      }
      node = next;
    }
    return node;
  }

  function pathOf(node) {
    const p = [];
    for (let n = node; n && n.parent; n = n.parent) {
      p.push(n.name);
    }
    return p.reverse().join('\u0000');
  }

  // A comparison's base: each path's share of its whole.
  function baseShares(root) {
    const shares = new Map();
    const walk = (n, path) => {
      shares.set(path, root.total ? n.total / root.total : 0);
      for (const k of n.kids.values()) {
        walk(k, path === '' ? k.name : path + '\u0000' + k.name);
      }
    };
    walk(root, '');
    return shares;
  }

  function matcher() {
    const s = state.search;
    if (s === '') {
      return null;
    }
    const m = /^\/(.*)\/$/.exec(s);
    if (m) {
      try {
        const re = new RegExp(m[1], 'i');
        return (name) => re.test(name);
      } catch (e) {
        return null;
      }
    }
    const low = s.toLowerCase();
    return (name) => name.toLowerCase().includes(low);
  }

  function hue(name) {
    let h = 0;
    for (let i = 0; i < name.length && i < 24; i++) {
      h = (h * 31 + name.charCodeAt(i)) >>> 0;
    }
    return h;
  }

  function color(node, match, shares) {
    if (match && match(node.name)) {
      return '#e040e0';
    }
    if (shares) {
      const before = shares.get(pathOf(node)) || 0;
      const now = ui.root.total ? node.total / ui.root.total : 0;
      const d = Math.max(-1, Math.min(1, (now - before) * 8));
      return d >= 0
        ? 'rgb(255,' + Math.round(230 - 170 * d) + ',' +
          Math.round(230 - 170 * d) + ')'
        : 'rgb(' + Math.round(230 + 170 * d) + ',' +
          Math.round(230 + 170 * d) + ',255)';
    }
    const h = hue(node.name);
    if (node.id >= 0 && ui.data.frames[node.id][3]) {
      return 'hsl(' + (90 + h % 50) + ',55%,' + (55 + h % 15) + '%)';
    }
    if (node.name.startsWith('[')) {
      return '#c8c8c8';
    }
    return 'hsl(' + (h % 55) + ',80%,' + (58 + (h >> 8) % 15) + '%)';
  }

  function draw() {
    const t0 = performance.now();
    const canvas = $('flame');
    const root = ui.root;
    const zoom = ui.zoom || root;
    const width = canvas.parentElement.clientWidth || 1000;
    const match = matcher();
    const shares = ui.base ? baseShares(ui.base) : null;
    const rects = [];

    // The zoomed node's ancestors, full width, then its subtree.
    const chain = [];
    for (let n = zoom; n; n = n.parent) {
      chain.unshift(n);
    }
    let depth = 0;
    const place = (node, x, w, d) => {
      rects.push({ node: node, name: node.name, x: x, y: d * ROW, w: w,
                   depth: d });
      depth = Math.max(depth, d + 1);
      if (node.kids.size === 0 || node.total <= 0) {
        return;
      }
      let cx = x;
      const kids = Array.from(node.kids.values())
        .sort((a, b) => a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
      for (const k of kids) {
        const kw = w * k.total / node.total;
        if (kw >= 0.5) {
          place(k, cx, kw, d + 1);
        }
        cx += kw;
      }
    };
    chain.slice(0, -1).forEach((n, d) => {
      rects.push({ node: n, name: n.name, x: 0, y: d * ROW, w: width,
                   depth: d, ancestor: true });
    });
    place(zoom, 0, width, chain.length - 1);

    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(Math.max(depth, 1) * ROW * ratio);
    canvas.style.height = (Math.max(depth, 1) * ROW) + 'px';
    const ctx = canvas.getContext('2d');
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, depth * ROW);
    ctx.font = '11px monospace';
    ctx.textBaseline = 'middle';
    for (const r of rects) {
      r.matched = !!(match && match(r.name));
      ctx.fillStyle = r.ancestor ? '#ddd' : color(r.node, match, shares);
      ctx.fillRect(r.x, r.y, Math.max(r.w - 0.5, 0.5), ROW - 1);
      if (r.w > 30) {
        ctx.fillStyle = '#000';
        const chars = Math.floor((r.w - 6) / 6.6);
        const text = r.name.length > chars
          ? r.name.slice(0, Math.max(chars - 2, 0)) + '..' : r.name;
        ctx.fillText(text, r.x + 3, r.y + ROW / 2);
      }
    }
    ui.rects = rects;
    ui.width = width;

    // What the search matches: each sample once.
    if (match) {
      let hit = 0;
      const walk = (n, inside) => {
        const m = inside || (n.parent !== null && match(n.name));
        if (m) {
          hit += n.total;
          return;
        }
        for (const k of n.kids.values()) {
          walk(k, false);
        }
      };
      walk(zoom, false);
      ui.matchedShare = zoom.total ? hit / zoom.total : 0;
      $('matched').textContent = 'matched "' + state.search + '": ' +
        (100 * ui.matchedShare).toFixed(1) + '% of what is shown';
    } else {
      ui.matchedShare = 0;
      $('matched').textContent = '';
    }

    const crumbs = $('crumbs');
    crumbs.textContent = '';
    if (zoom !== root) {
      crumbs.appendChild(document.createTextNode('zoomed into: '));
      chain.forEach((n, i) => {
        const s = document.createElement('span');
        s.textContent = n.name;
        s.addEventListener('click', () => zoomTo(n));
        crumbs.appendChild(s);
        if (i < chain.length - 1) {
          crumbs.appendChild(document.createTextNode(' > '));
        }
      });
    }
    ui.drawMs = performance.now() - t0;
  }

  function pct(v, total) {
    return total > 0 ? (100 * v / total).toFixed(2) + '%' : '-';
  }

  let sortBy = 'self';

  function tables() {
    const data = ui.data;
    const vi = TYPES[state.type] || 0;
    const fn = new Map();
    const files = new Map();
    let total = 0;
    let luaTotal = 0;
    for (const s of data.stacks) {
      const value = s[1 + vi];
      if (!(value > 0)) {
        continue;
      }
      const frames = viewFrames(s[0], data);
      if (frames === null) {
        continue;
      }
      total += value;
      const seen = new Set();
      frames.forEach((id, i) => {
        const name = frameLabel(data, id);
        let e = fn.get(name);
        if (e === undefined) {
          e = { name: name, self: 0, total: 0 };
          fn.set(name, e);
        }
        if (!seen.has(name)) {
          seen.add(name);
          e.total += value;
        }
        if (i === frames.length - 1) {
          e.self += value;
        }
      });
      // The innermost Lua function's file: the CPU its code runs.
      for (const id of s[0]) {
        const f = data.frames[id];
        if (f[3]) {
          files.set(f[1], (files.get(f[1]) || 0) + value);
          luaTotal += value;
          break;
        }
      }
    }
    const match = matcher();
    const rows = Array.from(fn.values()).sort((a, b) =>
      sortBy === 'name' ? (a.name < b.name ? -1 : 1) : b[sortBy] - a[sortBy]);
    const body = $('functions').tBodies[0];
    body.textContent = '';
    for (const e of rows.slice(0, 300)) {
      const tr = body.insertRow();
      if (match && match(e.name)) {
        tr.className = 'match';
      }
      tr.insertCell().textContent = e.name;
      const s = tr.insertCell();
      s.textContent = pct(e.self, total);
      s.className = 'num';
      const t = tr.insertCell();
      t.textContent = pct(e.total, total);
      t.className = 'num';
    }
    const lb = $('luafiles').tBodies[0];
    lb.textContent = '';
    $('luafiles-section').hidden = files.size === 0;
    for (const [file, v] of Array.from(files).sort((a, b) => b[1] - a[1])) {
      const tr = lb.insertRow();
      tr.insertCell().textContent = file;
      const c = tr.insertCell();
      c.textContent = pct(v, total);
      c.className = 'num';
    }
    ui.functions = rows;
    ui.luaFiles = files;
    ui.luaTotal = luaTotal;
  }

  function summary() {
    const d = ui.data;
    const vi = TYPES[state.type] || 0;
    const what = ['CPU time', 'wall time', 'off-CPU time'][vi];
    const ms = (ui.root.total / 1e6).toFixed(1);
    let text = d.profiles + ' profile(s)';
    if (d.profiles > 0) {
      text += ' from ' + new Date(d.from_ms).toLocaleTimeString() +
        ' to ' + new Date(d.to_ms).toLocaleTimeString();
    }
    text += ', ' + ms + ' ms of ' + what + ' shown';
    if (d.totals[2] === 0 && vi === 2) {
      text += ' (no off-CPU time in these profiles)';
    }
    if (state.stalls === '1') {
      text += ', samples taken in stalls only';
    }
    if (ui.base) {
      text += '; compared with the window before (red: a larger share ' +
        'now, blue: smaller)';
    }
    if (d.store) {
      text += '. Store: ' + d.store.records + ' profile(s), ' +
        (d.store.used / 1048576).toFixed(2) + ' of ' +
        (d.store.size / 1048576).toFixed(2) + ' MB';
    }
    $('summary').textContent = text;
  }

  function render() {
    const t0 = performance.now();
    const vi = TYPES[state.type] || 0;
    ui.root = buildTree(ui.data, vi);
    ui.base = ui.baseData ? buildTree(ui.baseData, vi) : null;
    ui.zoom = state.zoom ? findPath(ui.root, state.zoom) : null;
    ui.total = ui.root.total;
    summary();
    draw();
    tables();
    ui.renderMs = performance.now() - t0;
  }

  async function fetchData(extra) {
    const r = await fetch(location.pathname + '?' +
                          query(SERVER_FILTERS, extra),
                          { cache: 'no-store' });
    if (!r.ok) {
      throw new Error('the data: HTTP ' + r.status);
    }
    return r.json();
  }

  async function load() {
    ui.ready = false;
    const t0 = performance.now();
    try {
      ui.data = await fetchData({ data: '1' });
      ui.baseData = null;
      if (state.compare === '1' && state.window !== 'last') {
        ui.baseData = await fetchData({ data: '1', until: state.window,
                                        at: ui.data.at_ms });
      }
    } catch (e) {
      ui.error = String(e);
      $('summary').textContent = 'could not load the data: ' + e;
      return;
    }
    const d = ui.data;
    setOptions($('worker'), d.workers.map((w) => String(w.pid)),
               d.workers.map((w) => 'pid ' + w.pid + ' (' + w.profiles +
                             ' profiles)'), state.worker);
    setOptions($('endpoint'), d.endpoints, d.endpoints, state.endpoint);
    showState();
    render();
    ui.loadMs = performance.now() - t0;
    ui.ready = true;
  }

  function rectAt(ev) {
    const box = $('flame').getBoundingClientRect();
    const x = ev.clientX - box.left;
    const y = ev.clientY - box.top;
    for (const r of ui.rects) {
      if (y >= r.y && y < r.y + ROW && x >= r.x && x < r.x + r.w) {
        return r;
      }
    }
    return null;
  }

  // Each frame marked as in the original first option lists.
  for (const id of ['worker', 'endpoint']) {
    for (const o of $(id).options) {
      o.dataset.fixed = '1';
    }
  }

  $('flame').addEventListener('click', (ev) => {
    const r = rectAt(ev);
    if (r) {
      zoomTo(r.node);
    }
  });

  $('flame').addEventListener('mousemove', (ev) => {
    const r = rectAt(ev);
    const tip = $('tooltip');
    if (!r) {
      tip.hidden = true;
      return;
    }
    const f = r.node.id >= 0 ? ui.data.frames[r.node.id] : null;
    tip.textContent = r.name + (f && f[1] ? '\n' + f[1] + ':' + f[2] : '') +
      '\n' + (r.node.total / 1e6).toFixed(2) + ' ms, ' +
      pct(r.node.total, ui.root.total) + ' of all, self ' +
      pct(r.node.self, ui.root.total);
    tip.style.whiteSpace = 'pre';
    tip.style.left = (ev.clientX + 12) + 'px';
    tip.style.top = (ev.clientY + 12) + 'px';
    tip.hidden = false;
  });

  $('flame').addEventListener('mouseleave', () => {
    $('tooltip').hidden = true;
  });

  $('reset').addEventListener('click', () => zoomTo(null));

  $('controls').addEventListener('submit', (ev) => {
    ev.preventDefault();
    takeForm();
    load();
  });

  for (const id of ['type', 'view']) {
    $(id).addEventListener('change', () => {
      takeForm();
      showState();
      render();
    });
  }

  for (const id of ['worker', 'window', 'endpoint', 'stalls', 'compare']) {
    $(id).addEventListener('change', () => {
      takeForm();
      load();
    });
  }

  $('search').addEventListener('input', () => {
    state.search = $('search').value.trim();
    showState();
    draw();
    tables();
  });

  for (const th of document.querySelectorAll('#functions th')) {
    th.addEventListener('click', () => {
      sortBy = th.dataset.sort;
      tables();
    });
  }

  window.addEventListener('resize', () => {
    if (ui.root) {
      draw();
    }
  });

  load();
})();
