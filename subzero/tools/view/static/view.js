// subzero view: every 2-D node of a stored run as a pan/zoom image made of tiles, with linked
// brushing: a box (or a cell) brushed on one node lights up its backward lineage on every node
// upstream and its forward lineage on every node downstream (POST /api/lineage).
//
// An ES module with one seam, `mount(element, api)`: the page mounts it on its body with
// `httpApi()` (fetch over the viewer's HTTP server); the notebook widget mounts the same code on
// its cell with an api that sends the same requests over the widget's message channel.
//   api.request(path, body) -> Promise of a fetch-like response {ok, status, statusText, headers.get,
//                              json(), blob()}: GET without a body, POST with a JSON body
//   api.tile(node, z, ty, tx) -> an image source (a URL), or a Promise of one
//   api.onBrush(request)       optional: told every brush drawn on the page as {node, boxes}, and
//                              null on Clear (not those given to the returned brush/clear)
// mount returns {state, ready, brush(node, boxes), clear(), destroy()} (destroy: its window listeners off).

const COLORS = {
  brush: ["rgba(255,214,10,0.30)", "#ffd60a"],
  backward: ["rgba(255,55,95,0.40)", "#ff375f"],
  forward: ["rgba(48,213,255,0.40)", "#30d5ff"],
};
const W = 322, H = 300;   // canvas size (css px)
const MAX_DRAWN = 20000;  // boxes drawn per node at most (the count and bbox stay exact)

const TEMPLATE = `
<header>
  <h1>subzero view <span id="store"></span></h1>
  <div id="toolbar">
    <span class="help">drag: brush a box &middot; click: brush a cell &middot; shift-drag or right-drag: pan &middot; wheel: zoom &middot; double-click: fit</span>
    <button id="clear" type="button">Clear</button>
    <label>Export <select id="export-target"></select></label>
    <select id="export-format">
      <option value="npy">mask .npy</option>
      <option value="fits">mask FITS</option>
      <option value="reg">DS9 regions (image)</option>
      <option value="reg-fk5">DS9 regions (fk5)</option>
    </select>
    <button id="export" type="button" disabled>Export</button>
  </div>
  <div id="status">Brush any image: its backward lineage lights up upstream, its forward lineage downstream.</div>
  <div id="legend"><span class="sw brush"></span>brush <span class="sw backward"></span>backward (upstream)
    <span class="sw forward"></span>forward (downstream)</div>
</header>
<main id="nodes"></main>`;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function fmt(n) { return n.toLocaleString("en-US"); }
function cellsOf(b) { let n = 1; for (let k = 0; k < b.length; k += 2) n *= b[k + 1] - b[k]; return n; }  // a flat box's cells
function bboxText(b) {
  if (!b) return "none";
  const parts = [];
  for (let k = 0; k < b.length; k += 2) parts.push(`${b[k]}:${b[k + 1]}`);
  return b.length === 4 ? `rows ${parts[0]}, cols ${parts[1]}` : parts.join(", ");
}

// the api of the page: the viewer's HTTP server at `base` (the page's own origin by default)
export function httpApi(base) {
  const root = base || "";
  return {
    request: (path, body) => fetch(root + path, body === undefined ? {} : {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)}),
    tile: (node, z, ty, tx) => `${root}/tiles/${encodeURIComponent(node)}/${z}/${ty}/${tx}.png`,
  };
}

export function mount(element, transport) {
const state = {views: {}, nodes: [], request: null, answers: {}, lastExport: null, brushes: 0, errors: 0};
element.classList.add("subzero-view");
element.innerHTML = TEMPLATE;
const byId = (id) => element.querySelector(`#${id}`);
const unlisten = [];  // the window's listeners this mount added: removed by destroy()
function listen(type, fn) { window.addEventListener(type, fn); unlisten.push(() => window.removeEventListener(type, fn)); }
const $ = byId;
function status(text, error) { const s = $("status"); s.textContent = text; s.className = error ? "error" : ""; }

async function api(path, body) {
  const res = await transport.request(path, body);
  if (!res.ok) {
    let msg = res.statusText;
    try { msg = (await res.json()).error || msg; } catch (e) { /* not JSON */ }
    throw new Error(msg);
  }
  return res;
}

// -- one node's view --------------------------------------------------------------------------
class View {
  constructor(node, card) {
    this.node = node; this.card = card;
    this.rows = node.shape[0]; this.cols = node.shape[1];
    this.tile = node.tile; this.top = node.levels - 1;
    this.images = new Map(); this.tilesLoaded = 0;
    this.answer = null; this.role = null; this.brush = null; this.band = null;
    const canvas = el("canvas");
    const dpr = window.devicePixelRatio || 1;
    canvas.width = W * dpr; canvas.height = H * dpr;
    canvas.style.width = W + "px"; canvas.style.height = H + "px";
    canvas.dataset.node = node.name;
    this.canvas = canvas; this.ctx = canvas.getContext("2d"); this.dpr = dpr;
    card.appendChild(canvas);
    this.coords = card.appendChild(el("div", "coords"));
    this.fit();
    this.bind();
  }
  fit() {
    this.scale = Math.min(W / this.cols, H / this.rows);
    this.ox = (this.cols - W / this.scale) / 2; this.oy = (this.rows - H / this.scale) / 2;
    this.draw();
  }
  zoomTo(b, margin) {  // b = [r0, r1, c0, c1]
    const m = margin === undefined ? 0.25 : margin;
    const h = b[1] - b[0], w = b[3] - b[2];
    const pad = Math.max(4, m * Math.max(h, w));
    this.scale = Math.min(W / (w + 2 * pad), H / (h + 2 * pad), 32);
    this.ox = (b[2] + b[3]) / 2 - W / this.scale / 2; this.oy = (b[0] + b[1]) / 2 - H / this.scale / 2;
    this.draw();
  }
  cellAt(ev) {
    const r = this.canvas.getBoundingClientRect();
    return [this.oy + (ev.clientY - r.top) / this.scale, this.ox + (ev.clientX - r.left) / this.scale];
  }
  level() {
    const z = Math.floor(Math.log2(1 / this.scale));
    return Math.max(0, Math.min(this.top, z));
  }
  image(z, ty, tx) {
    const key = `${z}/${ty}/${tx}`;
    let img = this.images.get(key);
    if (!img) {
      img = new Image();
      img.onload = () => { this.tilesLoaded++; this.card.dataset.tiles = this.tilesLoaded; this.draw(); };
      img.onerror = () => { state.errors++; };
      Promise.resolve(transport.tile(this.node.name, z, ty, tx)).then((src) => { img.src = src; },
                                                                     () => { state.errors++; });
      this.images.set(key, img);
    }
    return img;
  }
  drawLevel(z) {
    const ctx = this.ctx, f = 2 ** z, span = this.tile * f;  // cells per tile
    const r0 = Math.max(0, this.oy), r1 = Math.min(this.rows, this.oy + H / this.scale);
    const c0 = Math.max(0, this.ox), c1 = Math.min(this.cols, this.ox + W / this.scale);
    for (let ty = Math.floor(r0 / span); ty * span < r1; ty++) {
      for (let tx = Math.floor(c0 / span); tx * span < c1; tx++) {
        const img = this.image(z, ty, tx);
        if (!img.complete || !img.naturalWidth) continue;
        ctx.drawImage(img, (tx * span - this.ox) * this.scale, (ty * span - this.oy) * this.scale,
                      img.naturalWidth * f * this.scale, img.naturalHeight * f * this.scale);
      }
    }
  }
  rect(b, fill, stroke) {
    const ctx = this.ctx, s = this.scale;
    let x = (b[2] - this.ox) * s, y = (b[0] - this.oy) * s, w = (b[3] - b[2]) * s, h = (b[1] - b[0]) * s;
    if (w < 3) { x -= (3 - w) / 2; w = 3; }
    if (h < 3) { y -= (3 - h) / 2; h = 3; }
    if (x > W || y > H || x + w < 0 || y + h < 0) return;
    if (fill) { ctx.fillStyle = fill; ctx.fillRect(x, y, w, h); }
    if (stroke) { ctx.strokeStyle = stroke; ctx.strokeRect(x + 0.5, y + 0.5, w - 1, h - 1); }
  }
  draw() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.paint(); });
  }
  paint() {
    const ctx = this.ctx;
    ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.fillStyle = "#0b0c0e"; ctx.fillRect(0, 0, W, H);
    const z = this.level();
    if (z !== this.top) this.drawLevel(this.top);  // the overview under the detail while it loads
    this.drawLevel(z);
    ctx.lineWidth = 1;
    if (this.answer && this.answer.boxes.length) {
      const [fill, stroke] = COLORS[this.role];
      const boxes = this.answer.boxes;
      const n = Math.min(boxes.length, MAX_DRAWN);
      for (let k = 0; k < n; k++) this.rect(boxes[k], fill, null);
      if (this.answer.bbox) { ctx.setLineDash([4, 3]); this.rect(this.answer.bbox, null, stroke); ctx.setLineDash([]); }
    }
    if (this.brush) for (const b of this.brush) this.rect(b, COLORS.brush[0], COLORS.brush[1]);
    if (this.band) { ctx.setLineDash([3, 3]); this.rect(this.band, null, COLORS.brush[1]); ctx.setLineDash([]); }
  }
  bind() {
    const c = this.canvas;
    let drag = null;
    c.addEventListener("contextmenu", (ev) => ev.preventDefault());
    c.addEventListener("mousedown", (ev) => {
      ev.preventDefault();
      const pan = ev.shiftKey || ev.button !== 0;
      drag = {pan, x: ev.clientX, y: ev.clientY, ox: this.ox, oy: this.oy, start: this.cellAt(ev)};
    });
    listen("mousemove", (ev) => {
      if (!drag) return;
      if (drag.pan) {
        this.ox = drag.ox - (ev.clientX - drag.x) / this.scale;
        this.oy = drag.oy - (ev.clientY - drag.y) / this.scale;
      } else {
        this.band = this.boxOf(drag.start, this.cellAt(ev));
      }
      this.draw();
    });
    listen("mouseup", (ev) => {
      if (!drag) return;
      const d = drag; drag = null; this.band = null;
      if (d.pan) return;
      const moved = Math.abs(ev.clientX - d.x) + Math.abs(ev.clientY - d.y) > 3;
      const end = this.cellAt(ev);
      const box = this.boxOf(moved ? d.start : end, end);
      if (box) brush(this, box); else this.draw();
    });
    c.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const [r, col] = this.cellAt(ev);
      const fit = Math.min(W / this.cols, H / this.rows);
      const s = Math.min(64, Math.max(fit / 4, this.scale * (ev.deltaY < 0 ? 1.25 : 0.8)));
      const rect = c.getBoundingClientRect();
      this.scale = s;
      this.ox = col - (ev.clientX - rect.left) / s; this.oy = r - (ev.clientY - rect.top) / s;
      this.draw();
    }, {passive: false});
    c.addEventListener("dblclick", () => this.fit());
    let last = 0, timer = null;
    c.addEventListener("mousemove", (ev) => {
      const [r, col] = this.cellAt(ev).map(Math.floor);
      if (r < 0 || col < 0 || r >= this.rows || col >= this.cols) { this.coords.textContent = ""; return; }
      this.coords.textContent = `row ${r}, col ${col}`;
      clearTimeout(timer);
      const ask = () => {
        last = Date.now();
        api(`/api/pixel/${encodeURIComponent(this.node.name)}?row=${r}&col=${col}`).then((res) => res.json())
          .then((p) => {
            let text = `row ${p.row}, col ${p.col}  value ${p.value === null ? "NaN" : p.value}`;
            if (p.ra !== undefined) text += `  RA ${p.ra.toFixed(6)}\u00b0 Dec ${p.dec.toFixed(6)}\u00b0`;
            this.coords.textContent = text;
          }).catch(() => {});
      };
      if (Date.now() - last > 120) ask(); else timer = setTimeout(ask, 120);
    });
  }
  boxOf(a, b) {  // two cell positions -> half-open [r0, r1, c0, c1] inside the array, or null
    const r0 = Math.max(0, Math.floor(Math.min(a[0], b[0]))), r1 = Math.min(this.rows, Math.floor(Math.max(a[0], b[0])) + 1);
    const c0 = Math.max(0, Math.floor(Math.min(a[1], b[1]))), c1 = Math.min(this.cols, Math.floor(Math.max(a[1], b[1])) + 1);
    return r1 > r0 && c1 > c0 ? [r0, r1, c0, c1] : null;
  }
}

// -- cards --------------------------------------------------------------------------------
function card(node) {
  const c = el("section", "card");
  c.dataset.node = node.name; c.dataset.cells = ""; c.dataset.tiles = "0";
  c.appendChild(el("div", "title", node.name));
  const meta = el("div", "meta", `${node.operator === "-" ? "input" : node.operator} \u00b7 ${node.shape.join(" \u00d7 ")} \u00b7 ${node.dtype}` +
                 (node.display !== "image" ? ` \u00b7 ${node.display}` : "") + (node.wcs ? " \u00b7 WCS" : ""));
  c.appendChild(meta);
  const chips = el("div", "meta");
  for (const s of node.strategies) chips.appendChild(el("span", "chip", s));
  if (node.strategies.length) c.appendChild(chips);
  if (node.shape.length !== 2) c.appendChild(el("div", "nodraw", `${node.shape.length}-D: not drawn; answers are counted below`));
  const answer = el("div", "answer");
  c.answerLine = answer;
  return c;
}

function showAnswer(name, role, answer, brushBoxes) {
  const v = state.views[name], c = element.querySelector(`.card[data-node="${CSS.escape(name)}"]`);
  if (!c) return;
  c.classList.remove("brushed", "backward", "forward");
  c.answerLine.textContent = "";
  c.dataset.cells = "";
  if (v) { v.answer = null; v.role = null; v.brush = null; }
  if (role === null) { if (v) v.draw(); return; }
  c.classList.add(role);
  if (role === "brush" || role === "brushed") {
    const n = brushBoxes.reduce((a, b) => a + cellsOf(b), 0);
    c.dataset.cells = String(n);
    c.answerLine.textContent = `brushed ${fmt(n)} cell(s): ${bboxText(brushBoxes[0])}`;
    if (v) { v.brush = brushBoxes; v.draw(); }
    return;
  }
  c.dataset.cells = String(answer.cells);
  c.answerLine.append(`${role}: ${fmt(answer.cells)} cell(s), bbox ${bboxText(answer.bbox)}`);
  if (v) {
    v.answer = answer; v.role = role; v.draw();
    if (answer.bbox) {
      const b = el("button", null, "zoom to answer");
      b.addEventListener("click", () => v.zoomTo(answer.bbox));
      c.answerLine.appendChild(b);
    }
  }
}

async function brush(view, box) {  // drawn on the page: the api is told
  if (transport.onBrush) transport.onBrush({node: view.node.name, boxes: [box]});
  return brushBoxes(view.node.name, [box]);
}

async function brushBoxes(name, boxes) {
  const box = boxes[0];
  state.request = {node: name, boxes};
  for (const n of state.nodes) showAnswer(n.name, null);
  showAnswer(name, "brushed", null, boxes);
  const brushed = boxes.reduce((a, b) => a + cellsOf(b), 0);
  status(`tracing ${fmt(brushed)} cell(s) of ${name}...`);
  const t0 = performance.now();
  try {
    const [back, fwd] = await Promise.all(["backward", "forward"].map((direction) =>
      api("/api/lineage", {node: name, direction, boxes, to: null}).then((r) => r.json())));
    state.answers = {};
    for (const [direction, got] of [["backward", back], ["forward", fwd]]) {
      for (const [n, a] of Object.entries(got.answers)) { state.answers[n] = {direction, ...a}; showAnswer(n, direction, a); }
    }
    state.brushes++;
    const targets = $("export-target");
    targets.innerHTML = "";
    for (const n of [name, ...Object.keys(state.answers)]) {
      const o = el("option", null, n === name ? `${n} (the brush)` : `${n} (${state.answers[n].direction})`);
      o.value = n; targets.appendChild(o);
    }
    $("export").disabled = false;
    status(`brushed ${boxes.length === 1 ? bboxText(box) : fmt(brushed) + " cell(s)"} of ${name}: backward ${back.ms.toFixed(1)} ms to ${Object.keys(back.answers).length} node(s), ` +
           `forward ${fwd.ms.toFixed(1)} ms to ${Object.keys(fwd.answers).length} node(s) (server); ` +
           `${(performance.now() - t0).toFixed(0)} ms in all`);
  } catch (e) {
    state.errors++;
    status(`error: ${e.message}`, true);
  }
}

async function exportAnswer() {
  if (!state.request) return;
  const target = $("export-target").value, format = $("export-format").value;
  const a = state.answers[target];
  const body = {node: state.request.node, boxes: state.request.boxes,
                direction: a ? a.direction : "backward", target, format};
  try {
    const res = await api("/api/export", body);
    const blob = await res.blob();
    const cd = res.headers.get("Content-Disposition") || "";
    const m = /filename="([^"]+)"/.exec(cd);
    const name = m ? m[1] : `${target}.${format}`;
    const link = el("a"); link.href = URL.createObjectURL(blob); link.download = name;
    element.appendChild(link); link.click(); link.remove();
    state.lastExport = {name, bytes: blob.size, format, target};
    status(`exported ${name} (${fmt(blob.size)} bytes)`);
  } catch (e) {
    state.lastExport = {error: e.message, format, target};
    status(`export failed: ${e.message}`, true);
  }
}

async function main() {
  try {
    const run = await (await api("/api/run")).json();
    $("store").textContent = `${run.workflow} \u00b7 ${run.store}`;
    if (element === document.body) document.title = `subzero view: ${run.workflow}`;
    state.nodes = await (await api("/api/nodes")).json();
  } catch (e) { status(`cannot load the run: ${e.message}`, true); return; }
  const main = $("nodes");
  for (const node of state.nodes) {
    const c = card(node);
    main.appendChild(c);
    if (node.shape.length === 2) state.views[node.name] = new View(node, c);
    c.appendChild(c.answerLine);
  }
  $("clear").addEventListener("click", () => { clear(); if (transport.onBrush) transport.onBrush(null); });
  $("export").addEventListener("click", exportAnswer);
  state.ready = true;
}

function clear() {
  state.request = null; state.answers = {};
  for (const n of state.nodes) showAnswer(n.name, null);
  $("export").disabled = true; $("export-target").innerHTML = "";
  status("cleared");
}

const ready = main();
return {
  state, ready,
  brush: (node, boxes) => ready.then(() => brushBoxes(node, boxes)),
  clear: () => ready.then(clear),
  destroy: () => { for (const f of unlisten.splice(0)) f(); },
};
}
