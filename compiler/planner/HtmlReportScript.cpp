//===- HtmlReportScript.cpp - Stylesheet and script of the HTML report ----===//
//
// The views are drawn in the browser from the page's JSON block (see
// HtmlReport.cpp for its fields): the plan and step breakdown, the pipeline
// timeline, the device map, memory per stage, runners-up and search. Plain
// DOM and SVG, no libraries, no network. A script error is written into
// #errors and marks #report data-status="error"; the browser test
// (tests/report) checks for data-status="ok".
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/HtmlReport.h"

namespace strata::planner {

const char *const kHtmlReportStyle = R"strata_css(
body { font: 14px/1.4 system-ui, sans-serif; margin: 20px 28px; color: #222; max-width: 1160px; }
h1 { font-size: 22px; margin-bottom: 2px; }
h2 { font-size: 18px; border-bottom: 1px solid #ccc; padding-bottom: 3px; margin-top: 30px; }
h3 { font-size: 15px; }
.sub, .intro, .note { color: #555; }
.summary { font-family: monospace; font-size: 15px; background: #f4f4f4; padding: 6px 10px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
thead th { background: #f0f0f0; }
table.runners td.differs { background: #fff3cd; font-weight: 600; }
table.runners td.why { max-width: 260px; font-size: 12px; }
.swatch { display: inline-block; width: 11px; height: 11px; border: 1px solid #888; vertical-align: -1px; }
svg { display: block; margin: 8px 0; }
svg text { font-size: 11px; fill: #222; }
svg text.evlabel { font-size: 10px; fill: #fff; pointer-events: none; }
svg text.rank { font-size: 9px; pointer-events: none; }
svg text.tick { fill: #666; }
.legend { font-size: 12px; }
.tree, .tree ul { list-style: none; padding-left: 18px; margin: 2px 0; }
#errors { color: #b00; }
#errors:empty { display: none; }
.warning { color: #8a5a00; background: #fff3cd; padding: 4px 8px; }
)strata_css";

const char *const kHtmlReportScript = R"strata_js(
'use strict';
(function () {
const errors = document.getElementById('errors');
window.addEventListener('error', function (ev) {
  errors.textContent += 'script error: ' + ev.message + '\n';
  document.getElementById('report').dataset.status = 'error';
});
const D = JSON.parse(document.getElementById('plan-data').textContent);
const root = document.getElementById('report');
const NS = 'http://www.w3.org/2000/svg';

function el(tag, attrs, parent, text) {
  const svg = ['svg', 'rect', 'line', 'text', 'g', 'title', 'path', 'defs', 'pattern'].indexOf(tag) >= 0;
  const e = svg ? document.createElementNS(NS, tag) : document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function secs(s) {
  if (s >= 1) return s.toFixed(3) + ' s';
  if (s >= 1e-3) return (s * 1e3).toFixed(2) + ' ms';
  return (s * 1e6).toFixed(1) + ' us';
}
function bytes(b) {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; ++i; }
  return b.toFixed(b >= 100 || i === 0 ? 0 : 1) + ' ' + u[i];
}
function count(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(1) + 'B';
  if (n >= 1e6) return (n / 1e6).toFixed(1) + 'M';
  return String(n);
}
function section(id, title, intro) {
  const s = el('section', {id: id}, root);
  el('h2', {}, s, title);
  if (intro) el('p', {class: 'intro'}, s, intro);
  return s;
}
function table(parent, head, rows, cls) {
  const t = el('table', {class: cls || ''}, parent);
  const hr = el('tr', {}, el('thead', {}, t));
  head.forEach(h => el('th', {}, hr, h));
  const tb = el('tbody', {}, t);
  rows.forEach(r => {
    const tr = el('tr', {}, tb);
    r.forEach(c => {
      if (c instanceof Node) el('td', {}, tr).appendChild(c);
      else el('td', {}, tr, c);
    });
  });
  return t;
}
function swatch(color) {
  const s = el('span', {class: 'swatch'});
  s.style.background = color;
  return s;
}

const P = D.plan, E = D.predicted;
const TERMS = [
  ['compute_s', 'compute', '#4e79a7'], ['tp_comm_s', 'exposed TP comm', '#e15759'],
  ['pp_comm_s', 'exposed PP send/recv', '#b07aa1'], ['dp_comm_s', 'exposed DP reduction', '#f28e2b'],
  ['zero_comm_s', 'exposed ZeRO-3 gathers', '#edc948'], ['bubble_s', 'pipeline bubble', '#bab0ac'],
  ['optimizer_s', 'optimizer', '#59a14f']];
const MEM = [
  ['weights', 'weights', '#4e79a7'], ['gradients', 'gradients', '#f28e2b'],
  ['optimizer', 'optimizer state', '#59a14f'], ['activations', 'activations', '#e15759'],
  ['buffers', 'comm buffers', '#b07aa1'], ['reserved', 'reserved', '#bab0ac']];
const LEVEL_COLORS = ['#2ca02c', '#1f77b4', '#d62728', '#9467bd', '#8c564b'];
const levels = D.cluster_info.levels.length ? D.cluster_info.levels
  : [{name: 'device', size: D.cluster_info.devices, unit_devices: D.cluster_info.devices}];
function levelColor(l) { return LEVEL_COLORS[l % LEVEL_COLORS.length]; }

// ---- header and plan ------------------------------------------------------
el('h1', {}, root, 'strata plan: ' + baseName(D.model_info.name) + ' on ' + D.cluster_info.name);
el('p', {class: 'sub'}, root, count(D.model_info.params) + ' parameters, ' +
  D.model_info.layers + ' layers, ' + D.model_info.dtype + '; ' +
  D.cluster_info.devices + ' x ' + D.cluster_info.device + ' (' +
  bytes(D.cluster_info.memory_bytes) + ' each)');

/// "12 12 12 11" -> "12 x3, 11": consecutive equal counts folded.
function runs(list) {
  const out = [];
  for (let i = 0; i < list.length;) {
    let j = i;
    while (j < list.length && list[j] === list[i]) ++j;
    out.push(j - i > 1 ? list[i] + ' x' + (j - i) : String(list[i]));
    i = j;
  }
  return out.join(', ');
}
function baseName(path) { return String(path).split('/').pop().replace(/\.ya?ml$/, ''); }

function renderPlan() {
  const s = section('plan', 'Plan and predicted step');
  el('p', {class: 'summary'}, s, D.summaries[0]);
  table(s, ['field', 'value'], [
    ['data parallel', P.dp], ['tensor parallel', P.tp + (P.sp ? ' with sequence parallelism' : '')],
    ['pipeline', P.pp + ' stages' + (P.vpp > 1 ? ' x ' + P.vpp + ' virtual' : '')],
    ['micro-batches', P.num_microbatches + ' of ' + P.micro_batch + ' per replica'],
    ['schedule', P.schedule], ['ZeRO stage', P.zero], ['recompute', P.recompute],
    ['placement (innermost first)', P.placement.join(', ')],
    ['layers per (virtual) stage', runs(P.stage_layers)]], 'kv');
  (D.warnings || []).forEach(w => el('p', {class: 'warning'}, s, 'warning: ' + w));
  el('h3', {}, s, 'Step time ' + secs(E.step_time_s) + ', ' + Math.round(E.tokens_per_s) +
    ' tokens/s, MFU ' + (100 * E.mfu).toFixed(1) + '%');
  const W = 900, svg = el('svg', {width: W, height: 34, class: 'breakdown'}, s);
  let x = 0;
  TERMS.forEach(([k, name, color]) => {
    const w = W * E.breakdown[k] / E.step_time_s;
    if (w <= 0) return;
    const r = el('rect', {x: x, y: 2, width: w, height: 30, fill: color}, svg);
    el('title', {}, r, name + ': ' + secs(E.breakdown[k]));
    x += w;
  });
  table(s, ['', 'term', 'time', 'share'], TERMS.map(([k, name, color]) =>
    [swatch(color), name, secs(E.breakdown[k]),
     (100 * E.breakdown[k] / E.step_time_s).toFixed(1) + '%']), 'breakdown-table');
  if (D.hidden_comm_s > 0)
    el('p', {class: 'note'}, s, 'Communication hidden under compute (overlap the step time relies on): ' +
      secs(D.hidden_comm_s) + ' per step.');
}

// ---- pipeline timeline ----------------------------------------------------
function renderTimeline() {
  const s = section('timeline', 'Pipeline timeline of one step',
    'Each pipeline stage has a compute row (forward F and backward B per micro-batch; ' +
    'virtual stages darker) and thin communication rows: tensor-parallel collectives, ' +
    'pipeline sends, data-parallel gradient buckets and ZeRO gathers. ' +
    'Grey hatching in a compute row is the bubble (the stage idles).');
  if (!D.timeline) { el('p', {class: 'note'}, s, 'No timeline: ' + D.timeline_error); return; }
  const T = D.timeline, end = T.step_end_s;
  const W = 1100, left = 70, right = 10, rowH = 22, commH = 6, gap = 8;
  const tracksUsed = [false, false, false, false];
  T.events.forEach(e => { tracksUsed[e[1]] = true; });
  const commTracks = [1, 2, 3].filter(t => tracksUsed[t]);
  const bandH = rowH + commTracks.length * (commH + 1) + gap;
  const H = 30 + T.pp * bandH;
  const svg = el('svg', {width: W, height: H, class: 'timeline'}, s);
  const defs = el('defs', {}, svg);
  const pat = el('pattern', {id: 'bubble', width: 6, height: 6, patternUnits: 'userSpaceOnUse',
    patternTransform: 'rotate(45)'}, defs);
  el('rect', {width: 6, height: 6, fill: '#eee'}, pat);
  el('line', {x1: 0, y1: 0, x2: 0, y2: 6, stroke: '#bbb', 'stroke-width': 3}, pat);
  const sx = t => left + (W - left - right) * t / end;
  for (let i = 0; i <= 10; ++i) {
    const t = end * i / 10, x = sx(t);
    el('line', {x1: x, y1: 18, x2: x, y2: H, stroke: '#ddd'}, svg);
    el('text', {x: x, y: 12, 'text-anchor': 'middle', class: 'tick'}, svg, secs(t));
  }
  const rowY = d => 24 + d * bandH;
  for (let d = 0; d < T.pp; ++d) {
    el('text', {x: 4, y: rowY(d) + 15, class: 'label'}, svg, 'stage ' + d);
    el('rect', {x: sx(0), y: rowY(d), width: sx(T.pipeline_end_s) - sx(0), height: rowH,
      fill: 'url(#bubble)', class: 'bubble'}, svg);
    commTracks.forEach((t, k) => {
      const y = rowY(d) + rowH + 1 + k * (commH + 1);
      el('rect', {x: sx(0), y: y, width: sx(end) - sx(0), height: commH, fill: '#fafafa'}, svg);
    });
  }
  const colors = {forward: '#4e79a7', backward: '#59a14f', optimizer: '#76b7b2',
    'dp-reduce': '#f28e2b', 'dp-bucket': '#ffbe7d', 'pp-send': '#b07aa1',
    'tp-comm': '#e15759', 'zero-gather': '#edc948', 'zero-reduce-scatter': '#d4a6c8'};
  const darker = (c, k) => {
    const n = parseInt(c.slice(1), 16), f = Math.pow(0.8, k);
    const r = Math.round((n >> 16) * f), g = Math.round(((n >> 8) & 255) * f), b = Math.round((n & 255) * f);
    return 'rgb(' + r + ',' + g + ',' + b + ')';
  };
  const frag = document.createDocumentFragment();
  let labels = 0;
  T.events.forEach(([d, track, start, dur, cat, name, chunk]) => {
    let y = rowY(d), h = rowH;
    if (track > 0) {
      const k = commTracks.indexOf(track);
      y = rowY(d) + rowH + 1 + k * (commH + 1);
      h = commH;
    }
    const w = Math.max(0.5, sx(start + dur) - sx(start));
    const fill = track === 0 && cat !== 'optimizer' ? darker(colors[cat] || '#999', chunk)
      : (colors[cat] || '#999');
    const r = el('rect', {x: sx(start), y: y, width: w, height: h, fill: fill,
      class: 'ev ev-' + cat}, frag);
    el('title', {}, r, 'stage ' + d + ': ' + name + ', ' + secs(dur) + ' from ' + secs(start));
    if (track === 0 && w > 22 && labels < 4000) {
      el('text', {x: sx(start) + w / 2, y: y + 15, 'text-anchor': 'middle', class: 'evlabel'},
        frag, name);
      ++labels;
    }
  });
  svg.appendChild(frag);
  const legend = el('p', {class: 'legend'}, s);
  Object.keys(colors).forEach(k => {
    legend.appendChild(swatch(colors[k]));
    legend.appendChild(document.createTextNode(' ' + k + '  '));
  });
  if (!T.tp_shown)
    el('p', {class: 'note'}, s, 'Per-layer collectives are left out of this view (too many to draw); ' +
      'strata plan --trace writes them.');
}

// ---- device map -------------------------------------------------------------
function coords(rank) {  // rank -> {tp, dp, pp}
  const c = {}, sizes = {tp: P.tp, dp: P.dp, pp: P.pp};
  let r = rank;
  P.placement.forEach(a => { c[a] = r % sizes[a]; r = Math.floor(r / sizes[a]); });
  return c;
}
function rankOf(c) {
  const sizes = {tp: P.tp, dp: P.dp, pp: P.pp};
  let r = 0, stride = 1;
  P.placement.forEach(a => { r += c[a] * stride; stride *= sizes[a]; });
  return r;
}
function groupOf(rank, axis) {
  const c = coords(rank), out = [], n = {tp: P.tp, dp: P.dp, pp: P.pp}[axis];
  for (let k = 0; k < n; ++k) { const o = Object.assign({}, c); o[axis] = k; out.push(rankOf(o)); }
  return out;
}
function stageColor(st) { return 'hsl(' + Math.round(360 * st / Math.max(1, P.pp)) + ',55%,62%)'; }

function renderDeviceMap() {
  const s = section('devices', 'Device map',
    'The topology tree of the cluster, outermost level first; each ' +
    (levels.length > 1 ? levels[0].name + ' unit is a box' : 'device is a cell') +
    ', coloured by the pipeline stage its devices run. Choose a rank to outline the members ' +
    'of its tp, dp and pp groups; each group kind is coloured by the topology level it crosses.');
  const tree = el('ul', {class: 'tree'}, s);
  let node = tree;
  for (let l = levels.length - 1; l >= 0; --l) {
    const li = el('li', {}, node);
    li.appendChild(swatch(levelColor(l)));
    li.appendChild(document.createTextNode(' ' + levels[l].name + ': ' + levels[l].size +
      (l > 0 ? ' x ' + levels[l - 1].name + ' units' : ' devices') +
      (levels[l].bandwidth ? ', ' + (levels[l].bandwidth / 1e9).toFixed(0) + ' GB/s per device' : '') +
      ' (' + levels[l].unit_devices + ' devices per unit)'));
    node = el('ul', {}, li);
  }
  const rows = D.groups.map(g => {
    const lv = levels[Math.min(g.level, levels.length - 1)];
    const ex = groupOf(0, g.axis);
    const members = ex.slice(0, 12).join(', ') + (ex.length > 12 ? ', ... (' + ex.length + ')' : '');
    const cell = el('span', {});
    cell.appendChild(swatch(levelColor(g.level)));
    cell.appendChild(document.createTextNode(' ' + lv.name));
    const algo = g.algorithm ? g.algorithm + (g.protocol ? ' / ' + g.protocol : '') : '-';
    return [g.name, g.size, g.stride, g.count, cell, g.what, algo, bytes(g.bytes_per_step),
      secs(g.comm_time_s) + (g.hidden_time_s > 0 ? ' (' + secs(g.hidden_time_s) + ' hidden)' : ''),
      members];
  });
  table(s, ['group', 'size', 'rank stride', 'groups', 'crosses level', 'carries',
    'collective (algorithm / protocol)', 'bytes/step per device', 'comm time/step',
    'rank 0\'s group'], rows, 'groups');
  if (!rows.length) el('p', {class: 'note'}, s, 'No process groups: the plan runs on one device.');
  el('h3', {}, s, 'Bytes per step per device, by topology level');
  table(s, ['', 'level', 'bytes/step', 'at full bandwidth'], D.level_bytes.map((b, l) =>
    [swatch(levelColor(l)), (levels[l] || {name: 'device'}).name, bytes(b),
     levels[l] && levels[l].bandwidth ? secs(b / levels[l].bandwidth) : '-']), 'levels');

  const ctl = el('p', {}, s);
  ctl.appendChild(document.createTextNode('Outline the groups of rank '));
  const input = el('input', {type: 'number', min: 0, max: D.cluster_info.devices - 1, value: 0, id: 'rank'}, ctl);
  const info = el('span', {class: 'rankinfo'}, ctl);

  const N = D.cluster_info.devices, unit = levels.length > 1 ? levels[0].unit_devices : N;
  const units = Math.ceil(N / unit);
  const perDevice = N <= 512;
  const cell = perDevice ? (N <= 64 ? 26 : 12) : 0;
  const boxW = perDevice ? Math.min(unit, 16) * (cell + 2) + 6 : (N <= 8192 ? 14 : 8);
  const boxH = perDevice ? Math.ceil(unit / 16) * (cell + 2) + 6 : boxW;
  const W = 1100, perRow = Math.max(1, Math.floor((W - 10) / (boxW + 4)));
  const H = Math.ceil(units / perRow) * (boxH + 4) + 10;
  const svg = el('svg', {width: W, height: H, class: 'devicemap'}, s);
  const shapes = [];  // per unit: {box, cells[]}
  for (let u = 0; u < units; ++u) {
    const bx = 5 + (u % perRow) * (boxW + 4), by = 5 + Math.floor(u / perRow) * (boxH + 4);
    const g = el('g', {}, svg);
    const first = u * unit;
    const box = el('rect', {x: bx, y: by, width: boxW, height: boxH, rx: 2,
      fill: perDevice ? '#f4f4f4' : stageColor(coords(first).pp), stroke: '#999', class: 'unit'}, g);
    el('title', {}, box, levels[0].name + ' ' + u + ': ranks ' + first + '-' + (Math.min(N, first + unit) - 1));
    const cells = [];
    if (perDevice) {
      for (let k = 0; k < unit && first + k < N; ++k) {
        const r = first + k, cx = bx + 3 + (k % 16) * (cell + 2), cy = by + 3 + Math.floor(k / 16) * (cell + 2);
        const c = coords(r);
        const rc = el('rect', {x: cx, y: cy, width: cell, height: cell, fill: stageColor(c.pp),
          class: 'device', 'data-rank': r}, g);
        el('title', {}, rc, 'rank ' + r + ': tp ' + c.tp + ', dp ' + c.dp + ', pp ' + c.pp);
        rc.addEventListener('mouseenter', () => { input.value = r; highlight(r); });
        if (cell >= 20) el('text', {x: cx + cell / 2, y: cy + cell / 2 + 4, 'text-anchor': 'middle',
          class: 'rank'}, g, r);
        cells.push(rc);
      }
    } else {
      // Aggregated: a unit holding several stages is drawn in stripes.
      const stages = [];
      for (let k = 0; k < unit && first + k < N; ++k) {
        const st = coords(first + k).pp;
        if (stages.indexOf(st) < 0) stages.push(st);
      }
      if (stages.length > 1) stages.slice(0, 8).forEach((st, i, a) =>
        el('rect', {x: bx, y: by + i * boxH / a.length, width: boxW, height: boxH / a.length,
          fill: stageColor(st)}, g));
    }
    shapes.push({box: box, cells: cells});
  }
  function highlight(rank) {
    rank = Math.max(0, Math.min(N - 1, rank | 0));
    shapes.forEach(sh => { sh.box.setAttribute('stroke', '#999'); sh.box.setAttribute('stroke-width', 1);
      sh.cells.forEach(c => { c.setAttribute('stroke', 'none'); }); });
    const c = coords(rank);
    info.textContent = ' rank ' + rank + ' = tp ' + c.tp + ', dp ' + c.dp + ', pp ' + c.pp + '. ';
    ['pp', 'dp', 'tp'].forEach(axis => {
      const g = D.groups.find(x => x.axis === axis);
      const color = levelColor(g ? g.level : 0);
      const members = groupOf(rank, axis);
      info.textContent += axis + ' group: ' + (members.length > 8 ? members.slice(0, 8).join(',') +
        ',... (' + members.length + ')' : members.join(',')) + '; ';
      members.forEach(m => {
        const sh = shapes[Math.floor(m / unit)];
        if (perDevice) {
          const cl = sh.cells[m % unit];
          cl.setAttribute('stroke', color);
          cl.setAttribute('stroke-width', axis === 'tp' ? 4 : axis === 'dp' ? 3 : 2);
        } else {
          sh.box.setAttribute('stroke', color);
          sh.box.setAttribute('stroke-width', 2);
        }
      });
    });
  }
  input.addEventListener('input', () => highlight(Number(input.value)));
  highlight(0);
  const legend = el('p', {class: 'legend'}, s);
  for (let st = 0; st < Math.min(P.pp, 32); ++st) {
    legend.appendChild(swatch(stageColor(st)));
    legend.appendChild(document.createTextNode(' stage ' + st + '  '));
  }
}

// ---- memory -----------------------------------------------------------------
function renderMemory() {
  const s = section('memory', 'Memory per pipeline stage',
    'Peak bytes on one device of each stage, stacked by category, against the device limit (red line).');
  const limit = E.memory_limit_bytes;
  const totals = D.stages.map(st => MEM.reduce((a, [k]) => a + st.memory[k], 0));
  const max = Math.max(limit, ...totals) * 1.05;
  const W = 1000, left = 90, barH = D.stages.length > 32 ? 8 : 20;
  const H = 30 + D.stages.length * (barH + 4);
  const svg = el('svg', {width: W, height: H, class: 'memory'}, s);
  const sx = b => left + (W - left - 120) * b / max;
  D.stages.forEach((st, i) => {
    const y = 20 + i * (barH + 4);
    el('text', {x: 4, y: y + barH - 2, class: 'label'}, svg,
      'stage ' + st.device + (barH >= 16 ? ' (' + st.layers + ' L)' : ''));
    let x = 0;
    MEM.forEach(([k, name, color]) => {
      const w = sx(x + st.memory[k]) - sx(x);
      const r = el('rect', {x: sx(x), y: y, width: Math.max(0, w), height: barH, fill: color,
        class: 'mem mem-' + k}, svg);
      el('title', {}, r, 'stage ' + st.device + ' ' + name + ': ' + bytes(st.memory[k]));
      x += st.memory[k];
    });
    el('text', {x: sx(totals[i]) + 4, y: y + barH - 2, class: 'label'}, svg, bytes(totals[i]));
  });
  el('line', {x1: sx(limit), y1: 12, x2: sx(limit), y2: H, stroke: '#d00', 'stroke-width': 2,
    class: 'limit'}, svg);
  el('text', {x: sx(limit), y: 10, 'text-anchor': 'middle', class: 'tick'}, svg,
    'limit ' + bytes(limit));
  const legend = el('p', {class: 'legend'}, s);
  MEM.forEach(([k, name, color]) => {
    legend.appendChild(swatch(color));
    legend.appendChild(document.createTextNode(' ' + name + '  '));
  });
}

// ---- runners-up and search ------------------------------------------------------
function renderRunnersUp() {
  const s = section('runners-up', 'Best plan and runners-up',
    'Side by side; cells that differ from the best plan are marked.');
  const all = [{plan: D.plan, predicted: D.predicted, why: 'best'}].concat(D.runners_up);
  const fields = [['dp', p => p.dp], ['tp', p => p.tp], ['pp', p => p.pp], ['vpp', p => p.vpp],
    ['micro-batch', p => p.micro_batch + ' x ' + p.num_microbatches], ['schedule', p => p.schedule],
    ['ZeRO', p => p.zero], ['recompute', p => p.recompute], ['sp', p => p.sp ? 'yes' : 'no'],
    ['placement', p => p.placement.join(',')]];
  const t = el('table', {class: 'runners'}, s);
  const hr = el('tr', {}, el('thead', {}, t));
  el('th', {}, hr, '');
  all.forEach((a, i) => el('th', {}, hr, i === 0 ? 'best' : '#' + (i + 1)));
  const tb = el('tbody', {}, t);
  const row = (name, f, fmt) => {
    const tr = el('tr', {}, tb);
    el('th', {}, tr, name);
    const base = f(all[0]);
    all.forEach((a, i) => {
      const v = f(a);
      el('td', {class: i > 0 && String(v) !== String(base) ? 'differs' : ''}, tr, fmt ? fmt(v) : v);
    });
  };
  fields.forEach(([name, f]) => row(name, a => f(a.plan)));
  row('step time', a => a.predicted.step_time_s, secs);
  TERMS.forEach(([k, name]) => row(name, a => a.predicted.breakdown[k], secs));
  row('peak memory', a => a.predicted.peak_memory_bytes, bytes);
  row('MFU', a => (100 * a.predicted.mfu).toFixed(1) + '%');
  const tr = el('tr', {}, tb);
  el('th', {}, tr, 'why it lost');
  all.forEach((a, i) => el('td', {class: 'why'}, tr, i === 0 ? '-' : a.why));
  if (all.length === 1) el('p', {class: 'note'}, s, 'No runners-up (--top 1, or nothing else fits).');
}

function renderSearch() {
  const s = section('search', 'Pins and search');
  table(s, ['', ''], [
    ['pins', D.pins.length ? D.pins.join('; ') : 'none (every field searched)'],
    ['search time', secs(D.search.time_s)],
    ['candidates', D.search.space_size + ' in the space, ' + D.search.candidates_evaluated +
      ' costed after memory and bound pruning']], 'kv');
}

// ---- a measured run beside the prediction ------------------------------------
// Categories as bench/trace/trace_compare.py splits them (docs/report.md).
function measuredBreakdown(M) {
  const per = {}, steps = {};
  const keys = ['compute', 'tp', 'dp', 'pp_send', 'pp_recv', 'optimizer'];
  M.events.forEach(([rank, tid, ts, dur, cat, name, step]) => {
    const k = rank + '/' + step;
    const d = per[k] || (per[k] = Object.fromEntries(keys.map(x => [x, 0])));
    const s = dur * 1e-6;
    if (cat === 'step') steps[k] = s;
    else if (cat === 'compute' || cat === 'optimizer') d[cat] += s;
    else if (tid === 2) d[/^(wait )?recv/.test(name) ? 'pp_recv' : 'pp_send'] += s;
    else d[tid === 1 ? 'tp' : 'dp'] += s;
  });
  const ks = Object.keys(steps);
  if (!ks.length) return null;
  const out = {};
  keys.forEach(x => { out[x] = ks.reduce((a, k) => a + per[k][x], 0) / ks.length; });
  out.step = ks.reduce((a, k) => a + steps[k], 0) / ks.length;
  out.other = out.step - keys.reduce((a, x) => a + out[x], 0);
  return out;
}

function renderMeasured() {
  if (!D.measured) return;
  const M = D.measured;
  const s = section('measured', 'Measured run beside the prediction',
    M.ranks + ' rank(s) from ' + M.source + '. Times per step, the mean over ranks and traced ' +
    'steps. On the pipeline track, sends count as PP communication and receives as bubble ' +
    '(a receiving rank mostly waits for its peer).');
  const m = measuredBreakdown(M), b = E.breakdown;
  if (m) {
    const rows = [['compute', b.compute_s, m.compute], ['exposed TP comm', b.tp_comm_s, m.tp],
      ['exposed DP comm (incl. ZeRO)', b.dp_comm_s + b.zero_comm_s, m.dp],
      ['exposed PP comm', b.pp_comm_s, m.pp_send], ['pipeline bubble', b.bubble_s, m.pp_recv],
      ['optimizer', b.optimizer_s, m.optimizer], ['other (outside instructions)', null, m.other],
      ['step', E.step_time_s, m.step]];
    table(s, ['category', 'predicted', 'measured', 'predicted / measured'], rows.map(([n, p, x]) =>
      [n, p === null ? '-' : secs(p), secs(Math.max(0, x)),
       p === null || x <= 0 ? '-' : (p / x).toFixed(2)]), 'measured-table');
  }
  // The first traced step of every rank (at most 64 ranks drawn).
  let first = Infinity;
  M.events.forEach(e => { if (e[4] === 'step') first = Math.min(first, e[6]); });
  const spans = M.events.filter(e => e[4] === 'step' && e[6] === first);
  if (!spans.length) return;
  const t0 = Math.min(...spans.map(e => e[2])), t1 = Math.max(...spans.map(e => e[2] + e[3]));
  const ranks = [...new Set(spans.map(e => e[0]))].sort((a, b) => a - b).slice(0, 64);
  const W = 1100, left = 70, right = 10, rowH = 16, commH = 6, bandH = rowH + 3 * (commH + 1) + 6;
  const svg = el('svg', {width: W, height: 24 + ranks.length * bandH, class: 'measured-timeline'}, s);
  const sx = t => left + (W - left - right) * (t - t0) / Math.max(1e-9, t1 - t0);
  for (let i = 0; i <= 10; ++i) {
    const t = t0 + (t1 - t0) * i / 10;
    el('text', {x: sx(t), y: 12, 'text-anchor': 'middle', class: 'tick'}, svg, secs((t - t0) * 1e-6));
  }
  const colors = {compute: '#4e79a7', optimizer: '#76b7b2', 'tp-comm': '#e15759',
    'pp-comm': '#b07aa1', 'dp-comm': '#f28e2b', wait: '#555'};
  const frag = document.createDocumentFragment();
  ranks.forEach((rank, i) => {
    const y0 = 20 + i * bandH;
    el('text', {x: 4, y: y0 + 12, class: 'label'}, frag, 'rank ' + rank);
    el('rect', {x: left, y: y0, width: W - left - right, height: rowH, fill: 'url(#bubble)'}, frag);
    M.events.forEach(([r, tid, ts, dur, cat, name, step]) => {
      if (r !== rank || step !== first || cat === 'step') return;
      const y = tid === 0 ? y0 : y0 + rowH + 1 + (tid - 1) * (commH + 1);
      const rc = el('rect', {x: sx(ts), y: y, width: Math.max(0.5, sx(ts + dur) - sx(ts)),
        height: tid === 0 ? rowH : commH, fill: colors[cat] || '#999', class: 'mev'}, frag);
      el('title', {}, rc, 'rank ' + rank + ': ' + name + ', ' + secs(dur * 1e-6));
    });
  });
  svg.appendChild(frag);
  const legend = el('p', {class: 'legend'}, s);
  Object.keys(colors).forEach(k => {
    legend.appendChild(swatch(colors[k]));
    legend.appendChild(document.createTextNode(' ' + k + '  '));
  });
}

[renderPlan, renderTimeline, renderDeviceMap, renderMemory, renderRunnersUp, renderSearch,
 renderMeasured]
  .forEach(f => {
    try { f(); } catch (e) {
      errors.textContent += f.name + ': ' + e + '\n';
      root.dataset.status = 'error';
    }
  });
if (root.dataset.status !== 'error') root.dataset.status = 'ok';
})();
)strata_js";

} // namespace strata::planner
