// subzero view: the page of a stored run, as an ES module.
//
//   import {mount, httpApi} from "./view.js";
//   const viewer = mount(element, httpApi(""), {urlState: true});
//
// `mount(element, api, options)` builds the whole viewer inside `element` and talks to the run
// only through `api` (httpApi: the viewer's HTTP API; a notebook widget gives its own with the
// same three methods: json(path), post(path, body) -> Response, bytes(path) -> {buffer, shape, dtype}).
// Options: urlState (keep the view in the page's URL), onSelect(selection) (called with
// {node, boxes} whenever the brushed cells change, with null when they are cleared).
// It returns {state, ready, show(node), select(shapes, node, mode), selectBoxes(boxes, node),
// selection(), clear(), loadRegions(text), loadCatalog(text), destroy()}; `ready` is a promise
// settled once the run is loaded and the first node shown.
//
// The page: the workflow as a graph (click a node: it goes in the main frame), one large main
// frame (tiles of float32 values mapped to colours here: limits, stretch, colormap), small
// frames beside it for the nodes a brush's lineage reaches (pan, zoom and crosshair linked),
// a colour bar, axes, DS9's conventions (y up, 1-based x,y, sexagesimal RA/Dec, compass),
// brushes (box, circle, lasso, DS9 regions; replace or add), statistics and histograms.

// -- colours: one per direction everywhere; label colours keep away from both hues ----------
export const OVERLAY = {backward: "#ff00ff", forward: "#00ffff", brush: "#ffffff"};
const FILL = {backward: "rgba(255,0,255,0.35)", forward: "rgba(0,255,255,0.35)", brush: "rgba(255,255,255,0.30)"};
const MAX_MASK = 4e6;        // cells of a lineage's bounding box drawn as a mask (larger: boxes only)
const MAX_BOXES_DRAWN = 20000;

function lerpStops(stops) {  // [[t, r, g, b], ...] -> 256 x 3 Uint8Array
  const lut = new Uint8Array(768);
  for (let i = 0; i < 256; i++) {
    const t = i / 255;
    let k = 0;
    while (k < stops.length - 2 && t > stops[k + 1][0]) k++;
    const [t0, ...a] = stops[k], [t1, ...b] = stops[k + 1];
    const f = t1 > t0 ? Math.min(1, Math.max(0, (t - t0) / (t1 - t0))) : 0;
    for (let c = 0; c < 3; c++) lut[3 * i + c] = Math.round(a[c] + f * (b[c] - a[c]));
  }
  return lut;
}
export const COLORMAPS = {
  grey: lerpStops([[0, 0, 0, 0], [1, 255, 255, 255]]),
  viridis: lerpStops([[0, 68, 1, 84], [0.125, 71, 44, 122], [0.25, 59, 81, 139], [0.375, 44, 113, 142],
    [0.5, 33, 144, 141], [0.625, 39, 173, 129], [0.75, 92, 200, 99], [0.875, 170, 220, 50], [1, 253, 231, 37]]),
  heat: lerpStops([[0, 0, 0, 0], [0.34, 255, 0, 0], [0.67, 255, 255, 0], [1, 255, 255, 255]]),
  "grey (inverted)": lerpStops([[0, 255, 255, 255], [1, 0, 0, 0]]),
};
const NAN_RGB = [40, 40, 90];
const MASK_RGB = [[0, 0, 0], [255, 170, 0]];

// A label's colour: hues spread by the golden ratio, skipping the cyan and magenta bands.
export function labelColor(v) {
  if (v === 0) return [0, 0, 0];
  let h = ((v * 0.6180339887498949) % 1) * 0.75;  // 0.75 of the circle is allowed
  if (h >= 0.45) h += 0.11;                       // skip 0.45..0.56 (cyan)
  if (h >= 0.78) h += 0.14;                       // skip 0.78..0.92 (magenta)
  const s = 0.6 + 0.3 * ((v * 0.37) % 1), val = 0.95;
  const i = Math.floor(h * 6), f = h * 6 - i, p = val * (1 - s), q = val * (1 - f * s), t = val * (1 - (1 - f) * s);
  const rgb = [[val, t, p], [q, val, p], [p, val, t], [p, q, val], [t, p, val], [val, p, q]][i % 6];
  return rgb.map((x) => Math.round(255 * x));
}

export const STRETCHES = {
  linear: (t) => t,
  sqrt: (t) => Math.sqrt(t),
  log: (t) => Math.log10(1000 * t + 1) / 3,
  asinh: (t) => Math.asinh(10 * t) / Math.asinh(10),
};

// -- numbers -----------------------------------------------------------------------------
export function fmtValue(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return "NaN";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v) && Math.abs(v) < 1e9) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential((digits || 5) - 1).replace(/\.?0+e/, "e");
  return String(Number(v.toPrecision(digits || 5)));
}
function fmtInt(n) { return Number(n).toLocaleString("en-US"); }
export function sexagesimal(deg, hours) {
  let v = hours ? ((deg % 360) + 360) % 360 / 15 : deg;
  const sign = v < 0 ? "-" : (hours ? "" : "+");
  v = Math.abs(v);
  const decimals = hours ? 3 : 2;
  let d = Math.floor(v), m = Math.floor((v - d) * 60), s = ((v - d) * 60 - m) * 60;
  if (Number(s.toFixed(decimals)) >= 60) { s = 0; m += 1; }
  if (m >= 60) { m = 0; d += 1; }
  if (hours && d >= 24) d -= 24;
  const two = (x) => String(x).padStart(2, "0");
  return `${sign}${two(d)}:${two(m)}:${s.toFixed(decimals).padStart(3 + decimals, "0")}`;
}
function niceStep(span, n) {
  const raw = span / Math.max(1, n), p = 10 ** Math.floor(Math.log10(raw)), f = raw / p;
  return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * p;
}

// -- the HTTP API ----------------------------------------------------------------------------
// Each page names itself to the server (``X-Subzero-Client``), so that its newer brush supersedes
// its older one still being traced: the older answers 409 and is dropped (see `Cancelled`).
export function httpApi(base) {
  const root = base ? base.replace(/\/$/, "") + "/" : "";
  const client = `page-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
  return apiOver((path, body) => fetch(root + path, body === undefined ? {} : {
    method: "POST", headers: {"Content-Type": "application/json", "X-Subzero-Client": client},
    body: JSON.stringify(body)}));
}

// A request the server dropped because a newer one of this page replaced it: not an error.
export class Cancelled extends Error {}

// The page's api over any transport: ``send(path, body)`` answers like fetch (the HTTP server,
// or the notebook widget's message channel); an answer other than 2xx throws its error
// (a 409 that says ``cancelled`` throws `Cancelled`).
export function apiOver(send) {
  async function call(path, body) {
    const res = await send(path, body);
    if (!res.ok) {
      let msg = res.statusText, cancelled = false;
      try { const got = await res.json(); msg = got.error || msg; cancelled = res.status === 409 && !!got.cancelled; } catch (e) { /* not JSON */ }
      throw cancelled ? new Cancelled(msg) : new Error(msg);
    }
    return res;
  }
  return {
    json: async (path) => (await call(path)).json(),
    post: (path, body) => call(path, body),
    bytes: async (path) => {
      const res = await call(path);
      return {buffer: await res.arrayBuffer(), shape: (res.headers.get("X-Shape") || "0,0").split(",").map(Number),
        dtype: res.headers.get("X-Dtype") || "float32"};
    },
  };
}

// -- selections: shapes -> the cells whose centres are inside, as disjoint boxes --------------
// Shapes are in continuous cell coordinates (cell (r, c) spans [r, r+1) x [c, c+1)):
// {t: "box", r0, r1, c0, c1}, {t: "circle", r, c, rad}, {t: "poly", pts: [[r, c], ...]}.
function rowRuns(shape, rows, cols) {  // -> Map row -> [[c0, c1), ...]
  const out = new Map();
  const add = (r, x0, x1) => {  // cells whose centre c + 0.5 lies in [x0, x1]
    const c0 = Math.max(0, Math.ceil(x0 - 0.5)), c1 = Math.min(cols, Math.floor(x1 - 0.5) + 1);
    if (r < 0 || r >= rows || c1 <= c0) return;
    if (!out.has(r)) out.set(r, []);
    out.get(r).push([c0, c1]);
  };
  if (shape.t === "box") {
    for (let r = Math.max(0, Math.ceil(shape.r0 - 0.5)); r + 0.5 <= shape.r1 && r < rows; r++) add(r, shape.c0, shape.c1);
  } else if (shape.t === "circle") {
    for (let r = Math.max(0, Math.ceil(shape.r - shape.rad - 0.5)); r + 0.5 <= shape.r + shape.rad && r < rows; r++) {
      const dy = r + 0.5 - shape.r, half = Math.sqrt(Math.max(0, shape.rad * shape.rad - dy * dy));
      add(r, shape.c - half, shape.c + half);
    }
  } else if (shape.t === "poly" && shape.pts.length >= 3) {
    const pts = shape.pts, ys = pts.map((p) => p[0]);
    const lo = Math.max(0, Math.ceil(Math.min(...ys) - 0.5)), hi = Math.min(rows - 1, Math.floor(Math.max(...ys) - 0.5));
    for (let r = lo; r <= hi; r++) {
      const y = r + 0.5, xs = [];
      for (let k = 0; k < pts.length; k++) {
        const [ya, xa] = pts[k], [yb, xb] = pts[(k + 1) % pts.length];
        if ((ya <= y) !== (yb <= y)) xs.push(xa + (y - ya) / (yb - ya) * (xb - xa));
      }
      xs.sort((a, b) => a - b);
      for (let k = 0; k + 1 < xs.length; k += 2) add(r, xs[k], xs[k + 1] - 1e-9);
    }
  }
  return out;
}
export function shapesToBoxes(shapes, rows, cols) {
  const rowsMap = new Map();
  for (const s of shapes) for (const [r, runs] of rowRuns(s, rows, cols)) {
    if (!rowsMap.has(r)) rowsMap.set(r, []);
    rowsMap.get(r).push(...runs);
  }
  const boxes = [];
  let open = new Map();  // "c0,c1" -> box of the previous row
  let prev = -2;
  for (const r of [...rowsMap.keys()].sort((a, b) => a - b)) {
    const runs = rowsMap.get(r).sort((a, b) => a[0] - b[0]), merged = [];
    for (const run of runs) {
      const last = merged[merged.length - 1];
      if (last && run[0] <= last[1]) last[1] = Math.max(last[1], run[1]); else merged.push([...run]);
    }
    const next = new Map();
    for (const [c0, c1] of merged) {
      const key = `${c0},${c1}`, box = r === prev + 1 ? open.get(key) : undefined;
      if (box) { box[1] = r + 1; next.set(key, box); } else { const b = [r, r + 1, c0, c1]; boxes.push(b); next.set(key, b); }
    }
    open = next; prev = r;
  }
  return boxes;
}

// DS9 regions (image coordinates: 1-based, pixel (x, y) centred on column x-1, row y-1).
export function parseRegions(text) {
  const shapes = [];
  let system = "image";
  for (const raw of text.split(/[\n;]/)) {
    const line = raw.replace(/#.*/, "").trim();
    if (!line) continue;
    const low = line.toLowerCase();
    if (/^(image|physical)$/.test(low)) { system = "image"; continue; }
    if (/^(fk5|icrs|fk4|galactic|ecliptic|j2000|wcs.*)$/.test(low)) { system = low; continue; }
    const m = /^([+-]?)(box|circle|polygon)\s*\(([^)]*)\)/i.exec(line);
    if (!m) continue;
    if (system !== "image") throw new Error(`region "${line}" is in ${system} coordinates; save the regions in image coordinates`);
    if (m[1] === "-") continue;
    const v = m[3].split(/[\s,]+/).filter(Boolean).map(Number);
    if (v.some(Number.isNaN)) throw new Error(`region "${line}": not numbers`);
    const kind = m[2].toLowerCase();
    if (kind === "circle" && v.length >= 3) shapes.push({t: "circle", c: v[0] - 0.5, r: v[1] - 0.5, rad: v[2]});
    else if (kind === "box" && v.length >= 4) {
      if (v[4]) throw new Error(`region "${line}": rotated boxes are not supported; give polygon(...)`);
      shapes.push({t: "box", c0: v[0] - 0.5 - v[2] / 2, c1: v[0] - 0.5 + v[2] / 2, r0: v[1] - 0.5 - v[3] / 2, r1: v[1] - 0.5 + v[3] / 2});
    } else if (kind === "polygon" && v.length >= 6) {
      const pts = [];
      for (let k = 0; k + 1 < v.length; k += 2) pts.push([v[k + 1] - 0.5, v[k] - 0.5]);
      shapes.push({t: "poly", pts});
    }
  }
  if (!shapes.length) throw new Error("no box, circle or polygon region in image coordinates in the file");
  return shapes;
}
export function writeRegions(shapes) {
  const f = (x) => String(Number(x.toFixed(3)));
  const lines = ["# Region file format: DS9 version 4.1 (subzero view: the brush)", "image"];
  for (const s of shapes) {
    if (s.t === "box") lines.push(`box(${f((s.c0 + s.c1) / 2 + 0.5)},${f((s.r0 + s.r1) / 2 + 0.5)},${f(s.c1 - s.c0)},${f(s.r1 - s.r0)},0)`);
    else if (s.t === "circle") lines.push(`circle(${f(s.c + 0.5)},${f(s.r + 0.5)},${f(s.rad)})`);
    else lines.push(`polygon(${s.pts.map((p) => `${f(p[1] + 0.5)},${f(p[0] + 0.5)}`).join(",")})`);
  }
  return lines.join("\n") + "\n";
}

// A table written by `subzero catalog` (ECSV or CSV): one object a row, with at least the
// columns label, centroid_r, centroid_c; ECSV's meta names the label node ({node: NAME}).
export function parseCatalog(text) {
  const lines = text.split(/\r?\n/);
  const meta = /^#\s*-\s*\{node:\s*([^}\s]+)\s*\}/;
  let node = null, header = null;
  const rows = [];
  for (const line of lines) {
    if (line.startsWith("#")) { const m = meta.exec(line); if (m) node = m[1].replace(/^['"]|['"]$/g, ""); continue; }
    if (!line.trim()) continue;
    const cells = line.includes(",") ? line.split(",").map((x) => x.trim()) : line.trim().split(/\s+/);
    if (!header) { header = cells; continue; }
    const row = {};
    header.forEach((h, k) => { row[h] = Number(cells[k]); });
    rows.push(row);
  }
  for (const need of ["label", "centroid_r", "centroid_c"]) {
    if (!header || !header.includes(need)) throw new Error(`the table has no column ${need}; load a table written by subzero catalog`);
  }
  return {node, columns: header, rows};
}

// -- small DOM helpers ---------------------------------------------------------------------------
function el(tag, cls, text, parent) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  if (parent) parent.appendChild(e);
  return e;
}
function select(options, value, parent, label) {
  const wrap = el("label", "szv-ctl", label, parent);
  const s = el("select", null, null, wrap);
  for (const o of options) { const opt = el("option", null, o, s); opt.value = o; }
  s.value = value;
  return s;
}
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, parent) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

// ==============================================================================================
export function mount(element, api, options) {
  const opts = Object.assign({urlState: false}, options || {});
  const state = {ready: false, nodes: [], byName: {}, main: null, view: null, shapes: [], selNode: null,
    boxes: [], request: null, answers: {}, brushes: 0, errors: 0, lastExport: null, readout: "", stats: null,
    settings: {limits: "zscale", stretch: "asinh", cmap: "grey", outline: true, astro: null, tool: "lasso", mode: "replace"},
    frames: {}, tiles: {}, limits: {}, compass: {}, lines: {}};
  const controller = {state};
  element.classList.add("szv");
  element.innerHTML = "";

  // ---- layout ----
  const head = el("header", "szv-head", null, element);
  const title = el("div", "szv-title", "subzero view", head);
  const store = el("span", "szv-store", "", title);
  const bar = el("div", "szv-toolbar", null, head);
  const tools = el("span", "szv-group", null, bar);
  const toolButtons = {};
  for (const [t, label] of [["box", "\u25ad box"], ["circle", "\u25ef circle"], ["lasso", "\u27c6 lasso"]]) {
    const b = el("button", "szv-tool", label, tools);
    b.type = "button"; b.dataset.tool = t; toolButtons[t] = b;
    b.addEventListener("click", () => { state.settings.tool = t; syncControls(); });
  }
  const modeSel = select(["replace", "add"], "replace", bar, "selection ");
  const regionBtn = el("button", null, "regions in\u2026", bar); regionBtn.type = "button";
  const regionFile = el("input", null, null, bar); regionFile.type = "file"; regionFile.accept = ".reg,.txt"; regionFile.hidden = true;
  const regionOut = el("button", null, "regions out", bar); regionOut.type = "button";
  const catalogBtn = el("button", null, "catalog in\u2026", bar); catalogBtn.type = "button";
  const catalogFile = el("input", null, null, bar); catalogFile.type = "file"; catalogFile.accept = ".ecsv,.csv,.txt"; catalogFile.hidden = true;
  const clearBtn = el("button", null, "clear", bar); clearBtn.type = "button";
  const display = el("span", "szv-group", null, bar);
  const limitsSel = select(["zscale", "minmax", "99.5", "99", "95", "90"], "zscale", display, "limits ");
  const stretchSel = select(Object.keys(STRETCHES), "asinh", display, "stretch ");
  const cmapSel = select(Object.keys(COLORMAPS), "grey", display, "colormap ");
  const outlineBox = el("label", "szv-ctl", null, display); const outline = el("input", null, null, outlineBox);
  outline.type = "checkbox"; outline.checked = true; outlineBox.append(" lineage as outline");
  const astroBox = el("label", "szv-ctl", null, display); const astro = el("input", null, null, astroBox);
  astro.type = "checkbox"; astroBox.append(" astronomy (y up, 1-based, RA/Dec)");
  const expGroup = el("span", "szv-group", null, bar);
  const expTarget = el("select", "szv-export-target", null, el("label", "szv-ctl", "export ", expGroup));
  const expFormat = select(["npy", "fits", "reg", "reg-fk5"], "npy", expGroup, "");
  const expBtn = el("button", "szv-export", "export", expGroup); expBtn.type = "button"; expBtn.disabled = true;
  const statusLine = el("div", "szv-status", "Loading the run\u2026", head);
  const legend = el("div", "szv-legend", null, head);
  legend.innerHTML = `<span class="szv-sw szv-brush"></span>brush <span class="szv-sw szv-backward"></span>backward lineage (upstream) ` +
    `<span class="szv-sw szv-forward"></span>forward lineage (downstream)`;

  const body = el("div", "szv-body", null, element);
  const graphPane = el("aside", "szv-graph", null, body);
  const search = el("input", "szv-search", null, graphPane); search.type = "search"; search.placeholder = "find a node\u2026";
  const graphSvg = svg("svg", {class: "szv-graph-svg"}, graphPane);
  const centre = el("section", "szv-centre", null, body);
  const mainHead = el("div", "szv-main-head", null, centre);
  const mainTitle = el("span", "szv-main-title", "", mainHead);
  const enlarge = el("button", "szv-enlarge", "\u2922 enlarge", mainHead); enlarge.type = "button";
  const fitBtn = el("button", null, "fit", mainHead); fitBtn.type = "button";
  const mainBox = el("div", "szv-main", null, centre);
  const mainCanvas = el("canvas", "szv-main-canvas", null, mainBox);
  const readout = el("div", "szv-readout", "\u00a0", centre);
  const cbar = el("canvas", "szv-cbar", null, centre);
  const side = el("aside", "szv-side", null, body);
  const catalogPane = el("div", "szv-catalog", null, side);
  const statsPane = el("div", "szv-stats", null, side);
  const sideHead = el("div", "szv-side-head", "Brush an image: the nodes its lineage reaches appear here.", side);
  const frameList = el("div", "szv-frames", null, side);

  function status(text, error) { statusLine.textContent = text; statusLine.classList.toggle("szv-error", !!error); }
  function fail(e, what) {  // a brush a newer one replaced is not an error: the newer one reports
    if (e instanceof Cancelled) return;
    state.errors++; status(`${what}: ${e.message}`, true);
  }

  // ---- data ----
  function node(name) { return state.byName[name]; }
  function is2d(n) { return n && n.shape.length === 2 && n.shape[0] * n.shape[1] > 1; }
  function astroOn() { return state.settings.astro; }
  async function limitsOf(n) {
    if (n.display !== "image") return null;
    const key = `${n.name}|${state.settings.limits}`;
    if (!state.limits[key]) {
      state.limits[key] = api.json(`api/limits/${encodeURIComponent(n.name)}?mode=${encodeURIComponent(state.settings.limits)}`)
        .then((l) => { state.limits[key] = l; redrawAll(); return l; }).catch((e) => { fail(e, "limits"); });
    }
    const got = state.limits[key];
    return got && got.then ? null : got;
  }
  function limitsNow(n) {
    if (n.display !== "image") return null;
    const got = state.limits[`${n.name}|${state.settings.limits}`];
    if (!got) { limitsOf(n); return null; }
    return got.then ? null : got;
  }
  function renderKey(n) {
    const l = limitsNow(n);
    return n.display === "image" ? (l ? `${l.lo}|${l.hi}|${state.settings.stretch}|${state.settings.cmap}` : null) : n.display;
  }
  function tile(n, z, ty, tx) {  // -> a canvas of the tile in the current colours, or null while it loads
    const tiles = state.tiles[n.name] || (state.tiles[n.name] = new Map());
    const k = `${z}/${ty}/${tx}`;
    let t = tiles.get(k);
    if (!t) {
      t = {values: null, canvas: null, key: null};
      tiles.set(k, t);
      api.bytes(`api/values/${encodeURIComponent(n.name)}/${k}`).then(({buffer, shape, dtype}) => {
        t.values = dtype === "int32" ? new Int32Array(buffer) : new Float32Array(buffer); t.h = shape[0]; t.w = shape[1];
        redrawNode(n.name);
      }).catch((e) => { t.error = true; fail(e, `tile ${k} of ${n.name}`); });
    }
    if (!t.values) return null;
    const key = renderKey(n);
    if (key === null) return null;
    if (t.key !== key) { paintTile(n, t); t.key = key; }
    return t;
  }
  function paintTile(n, t) {
    if (!t.canvas) { t.canvas = document.createElement("canvas"); t.canvas.width = t.w; t.canvas.height = t.h; }
    const ctx = t.canvas.getContext("2d"), img = ctx.createImageData(t.w, t.h), px = img.data, v = t.values;
    if (n.display === "image") {
      const l = limitsNow(n), lut = COLORMAPS[state.settings.cmap], st = STRETCHES[state.settings.stretch];
      const table = new Uint8Array(1024);  // 1024 levels of the stretch -> colormap index
      for (let i = 0; i < 1024; i++) table[i] = Math.round(255 * Math.min(1, Math.max(0, st(i / 1023))));
      const lo = l.lo, span = l.hi - l.lo || 1;
      for (let i = 0, j = 0; i < v.length; i++, j += 4) {
        const x = v[i];
        if (Number.isFinite(x)) {
          let t01 = (x - lo) / span; t01 = t01 < 0 ? 0 : t01 > 1 ? 1 : t01;
          const c = 3 * table[Math.round(t01 * 1023)];
          px[j] = lut[c]; px[j + 1] = lut[c + 1]; px[j + 2] = lut[c + 2];
        } else { px[j] = NAN_RGB[0]; px[j + 1] = NAN_RGB[1]; px[j + 2] = NAN_RGB[2]; }
        px[j + 3] = 255;
      }
    } else {
      const cache = new Map();
      for (let i = 0, j = 0; i < v.length; i++, j += 4) {
        const x = v[i];
        let rgb;
        if (n.display === "mask") rgb = MASK_RGB[x ? 1 : 0];
        else { rgb = cache.get(x); if (!rgb) { rgb = labelColor(x); cache.set(x, rgb); } }
        px[j] = rgb[0]; px[j + 1] = rgb[1]; px[j + 2] = rgb[2]; px[j + 3] = 255;
      }
    }
    ctx.putImageData(img, 0, 0);
  }

  // ---- frames: one canvas showing one node ----
  // A frame's view: centre (cx, cy) in cell coordinates (col, row) and scale s (css px per cell).
  class Frame {
    constructor(n, canvas, role) {
      this.n = n; this.canvas = canvas; this.role = role; this.ctx = canvas.getContext("2d");
      this.margin = role === "main" ? {l: 52, r: 8, t: 8, b: 30} : {l: 0, r: 0, t: 0, b: 0};
      canvas.dataset.node = n.name;
      this.w = 0; this.h = 0; this.cx = n.shape[1] / 2; this.cy = n.shape[0] / 2; this.s = 1; this.cross = null;
      this.mask = null;
    }
    size() {
      const r = this.canvas.getBoundingClientRect(), dpr = window.devicePixelRatio || 1;
      const W = Math.max(10, Math.round(r.width)), H = Math.max(10, Math.round(r.height));
      if (this.canvas.width !== W * dpr || this.canvas.height !== H * dpr) { this.canvas.width = W * dpr; this.canvas.height = H * dpr; }
      this.W = W; this.H = H; this.dpr = dpr;
      this.w = W - this.margin.l - this.margin.r; this.h = H - this.margin.t - this.margin.b;
    }
    fitScale() { return Math.min(this.w / this.n.shape[1], this.h / this.n.shape[0]); }
    fit() { this.size(); this.s = this.fitScale(); this.cx = this.n.shape[1] / 2; this.cy = this.n.shape[0] / 2; }
    flip() { return !!astroOn(); }
    toCell(x, y) {  // css px inside the canvas -> [row, col] (continuous)
      const u = (x - this.margin.l - this.w / 2) / this.s + this.cx;
      const dv = (y - this.margin.t - this.h / 2) / this.s;
      return [this.flip() ? this.cy - dv : this.cy + dv, u];
    }
    toScreen(r, c) {
      const dv = (this.flip() ? this.cy - r : r - this.cy) * this.s;
      return [this.margin.l + this.w / 2 + (c - this.cx) * this.s, this.margin.t + this.h / 2 + dv];
    }
    cellTransform() {  // the context's transform that draws in cell coordinates
      const d = this.dpr, s = this.s, f = this.flip() ? -1 : 1;
      const [x0, y0] = this.toScreen(0, 0);
      this.ctx.setTransform(d * s, 0, 0, d * s * f, d * x0, d * y0);
    }
    window() {  // visible [r0, r1, c0, c1]
      const a = this.toCell(this.margin.l, this.margin.t), b = this.toCell(this.margin.l + this.w, this.margin.t + this.h);
      return [Math.min(a[0], b[0]), Math.max(a[0], b[0]), Math.min(a[1], b[1]), Math.max(a[1], b[1])];
    }
    level(top) { return Math.max(0, Math.min(top, Math.floor(Math.log2(1 / (this.s * this.dpr))))); }
    paint() {
      this.size();
      const ctx = this.ctx, n = this.n, [rows, cols] = n.shape, d = this.dpr;
      ctx.setTransform(d, 0, 0, d, 0, 0);
      ctx.fillStyle = "#0b0c0e"; ctx.fillRect(0, 0, this.W, this.H);
      ctx.save();
      ctx.beginPath(); ctx.rect(this.margin.l, this.margin.t, this.w, this.h); ctx.clip();
      this.cellTransform();
      ctx.imageSmoothingEnabled = false;
      const top = n.levels - 1, z = this.level(top), [r0, r1, c0, c1] = this.window();
      let drawn = 0, wanted = 0;
      for (const lev of z === top ? [top] : [top, z]) {
        const f = 2 ** lev, span = n.tile * f;
        for (let ty = Math.max(0, Math.floor(r0 / span)); ty * span < Math.min(rows, r1); ty++) {
          for (let tx = Math.max(0, Math.floor(c0 / span)); tx * span < Math.min(cols, c1); tx++) {
            wanted++;
            const t = tile(n, lev, ty, tx);
            if (!t) continue;
            drawn++;
            ctx.drawImage(t.canvas, tx * span, ty * span, t.w * f, t.h * f);
          }
        }
      }
      this.tilesDrawn = drawn; this.canvas.dataset.tiles = String(drawn);
      this.paintOverlays();
      ctx.restore();
      if (this.role === "main") this.paintAxes();
    }
    paintOverlays() {
      const ctx = this.ctx, name = this.n.name;
      const a = state.answers[name];
      if (a && a.boxes && a.boxes.length) this.paintRegion(a, OVERLAY[a.direction], FILL[a.direction]);
      if (state.selNode === name && state.boxes.length) {
        this.paintRegion({boxes: state.boxes, bbox: bboxOf(state.boxes), key: "brush"}, OVERLAY.brush, FILL.brush, true);
        this.paintShapes();
      }
      if (this.band) this.paintShapeList([this.band], "#ffffff", [4, 3]);
      this.paintCatalog();
      if (this.cross) {
        const [r, c] = this.cross, [rr0, rr1, cc0, cc1] = this.window(), lw = 1 / this.s;
        ctx.lineWidth = lw; ctx.strokeStyle = "rgba(255,255,120,0.85)"; ctx.setLineDash([4 * lw, 3 * lw]);
        ctx.beginPath(); ctx.moveTo(cc0, r); ctx.lineTo(cc1, r); ctx.moveTo(c, rr0); ctx.lineTo(c, rr1); ctx.stroke();
        ctx.setLineDash([]);
      }
    }
    paintCatalog() {  // the loaded catalogue's objects: a yellow ring each, on frames of its label node's shape
      const cat = state.catalog, n = cat && node(cat.node);
      if (!n || n.shape[0] !== this.n.shape[0] || n.shape[1] !== this.n.shape[1]) return;
      const ctx = this.ctx, [r0, r1, c0, c1] = this.window();
      ctx.setLineDash([]);
      for (const pass of [["rgba(0,0,0,0.8)", 3], ["#ffe14d", 1.4]]) {
        ctx.strokeStyle = pass[0]; ctx.lineWidth = pass[1] / this.s; ctx.beginPath();
        for (const row of cat.rows) {
          const r = row.centroid_r + 0.5, c = row.centroid_c + 0.5, rad = Math.sqrt((row.area || 4) / Math.PI) + 1.5;
          if (r + rad < r0 || r - rad > r1 || c + rad < c0 || c - rad > c1) continue;
          ctx.moveTo(c + rad, r); ctx.arc(c, r, rad, 0, 2 * Math.PI);
        }
        ctx.stroke();
      }
    }
    paintShapes() {  // the drawn shapes (an object's rows, "o", are outlined by the selection itself)
      this.paintShapeList(state.shapes.filter((x) => !x.o), "rgba(255,255,255,0.9)", [3, 3]);
    }
    paintShapeList(shapes, colour, dash) {
      const ctx = this.ctx, lw = 1.5 / this.s;
      ctx.lineWidth = lw; ctx.strokeStyle = colour; ctx.setLineDash(dash.map((x) => x / this.s));
      for (const s of shapes) {
        ctx.beginPath();
        if (s.t === "box") ctx.rect(s.c0, s.r0, s.c1 - s.c0, s.r1 - s.r0);
        else if (s.t === "circle") ctx.arc(s.c, s.r, s.rad, 0, 2 * Math.PI);
        else { s.pts.forEach((p, k) => (k ? ctx.lineTo(p[1], p[0]) : ctx.moveTo(p[1], p[0]))); if (!s.open) ctx.closePath(); }
        ctx.stroke();
      }
      ctx.setLineDash([]);
    }
    // the cells of `a` (disjoint boxes): as an outline on cell edges, or filled
    paintRegion(a, stroke, fill, brush) {
      const ctx = this.ctx, lw = (brush ? 1.2 : 2) / this.s;
      const m = regionMask(a, this.n.shape);
      const asOutline = brush || state.settings.outline;
      if (!m) {  // too large for a mask: boxes
        ctx.lineWidth = lw; ctx.strokeStyle = stroke; ctx.fillStyle = fill;
        for (const b of a.boxes.slice(0, MAX_BOXES_DRAWN)) {
          if (asOutline) ctx.strokeRect(b[2], b[0], b[3] - b[2], b[1] - b[0]); else ctx.fillRect(b[2], b[0], b[3] - b[2], b[1] - b[0]);
        }
        return;
      }
      if (!asOutline) { ctx.drawImage(m.fill(fill), m.c0, m.r0); return; }
      if (this.s >= 3) {  // edges between cells in and out, within the view
        const [vr0, vr1, vc0, vc1] = this.window();
        const r0 = Math.max(m.r0, Math.floor(vr0) - 1), r1 = Math.min(m.r0 + m.h, Math.ceil(vr1) + 1);
        const c0 = Math.max(m.c0, Math.floor(vc0) - 1), c1 = Math.min(m.c0 + m.w, Math.ceil(vc1) + 1);
        const at = (r, c) => r >= m.r0 && r < m.r0 + m.h && c >= m.c0 && c < m.c0 + m.w && m.bits[(r - m.r0) * m.w + (c - m.c0)];
        ctx.beginPath();
        for (let r = r0; r < r1; r++) for (let c = c0; c < c1; c++) {
          if (!at(r, c)) continue;
          if (!at(r - 1, c)) { ctx.moveTo(c, r); ctx.lineTo(c + 1, r); }
          if (!at(r + 1, c)) { ctx.moveTo(c, r + 1); ctx.lineTo(c + 1, r + 1); }
          if (!at(r, c - 1)) { ctx.moveTo(c, r); ctx.lineTo(c, r + 1); }
          if (!at(r, c + 1)) { ctx.moveTo(c + 1, r); ctx.lineTo(c + 1, r + 1); }
        }
        if (brush) { ctx.lineWidth = 3 / this.s; ctx.strokeStyle = "#000"; ctx.stroke(); }
        ctx.lineWidth = lw; ctx.strokeStyle = stroke; ctx.stroke();
      } else {
        ctx.drawImage(m.edge(stroke), m.c0, m.r0);
      }
    }
    paintAxes() {
      const ctx = this.ctx, d = this.dpr, astroMode = astroOn();
      ctx.setTransform(d, 0, 0, d, 0, 0);
      ctx.strokeStyle = "#777"; ctx.fillStyle = "#bbb"; ctx.lineWidth = 1; ctx.font = "11px system-ui, sans-serif";
      ctx.strokeRect(this.margin.l - 0.5, this.margin.t - 0.5, this.w + 1, this.h + 1);
      const [r0, r1, c0, c1] = this.window(), off = astroMode ? -0.5 : 0.5;  // label L sits at L + off
      const ticks = (lo, hi, px) => {
        const step = Math.max(1, niceStep(hi - lo, px / 70)), out = [];
        for (let L = Math.ceil((lo - off) / step) * step; L + off <= hi; L += step) out.push(L);
        return out;
      };
      ctx.textAlign = "center"; ctx.textBaseline = "top";
      for (const L of ticks(c0, c1, this.w)) {
        const [x] = this.toScreen(this.cy, L + off), y = this.margin.t + this.h;
        ctx.beginPath(); ctx.moveTo(x, y); ctx.lineTo(x, y + 5); ctx.stroke(); ctx.fillText(String(L), x, y + 7);
      }
      ctx.textAlign = "right"; ctx.textBaseline = "middle";
      for (const L of ticks(r0, r1, this.h)) {
        const [, y] = this.toScreen(L + off, this.cx), x = this.margin.l;
        ctx.beginPath(); ctx.moveTo(x - 5, y); ctx.lineTo(x, y); ctx.stroke(); ctx.fillText(String(L), x - 7, y);
      }
      ctx.save(); ctx.translate(11, this.margin.t + this.h / 2); ctx.rotate(-Math.PI / 2); ctx.textAlign = "center";
      ctx.fillText(astroMode ? "y" : "row", 0, 0); ctx.restore();
      ctx.textAlign = "left"; ctx.textBaseline = "top";
      ctx.textAlign = "right"; ctx.fillText(astroMode ? "x" : "col", this.margin.l - 12, this.margin.t + this.h + 7);
      const comp = state.compass[this.n.name];
      if (astroMode && comp && comp.north) this.paintCompass(comp);
    }
    paintCompass(comp) {
      const ctx = this.ctx, x0 = this.margin.l + this.w - 46, y0 = this.margin.t + 46, len = 32;
      ctx.lineWidth = 2; ctx.font = "bold 12px system-ui, sans-serif"; ctx.textAlign = "center"; ctx.textBaseline = "middle";
      for (const [key, label, colour] of [["north", "N", "#ffd24d"], ["east", "E", "#9fe870"]]) {
        const [dc, dr] = comp[key], dx = dc * len, dy = (this.flip() ? -dr : dr) * len;
        ctx.strokeStyle = colour; ctx.fillStyle = colour;
        ctx.beginPath(); ctx.moveTo(x0, y0); ctx.lineTo(x0 + dx, y0 + dy); ctx.stroke();
        const a = Math.atan2(dy, dx);
        ctx.beginPath(); ctx.moveTo(x0 + dx, y0 + dy);
        ctx.lineTo(x0 + dx - 7 * Math.cos(a - 0.4), y0 + dy - 7 * Math.sin(a - 0.4));
        ctx.lineTo(x0 + dx - 7 * Math.cos(a + 0.4), y0 + dy - 7 * Math.sin(a + 0.4)); ctx.fill();
        ctx.fillText(label, x0 + dx * 1.35, y0 + dy * 1.35);
      }
    }
  }
  function bboxOf(boxes) {
    if (!boxes.length) return null;
    const b = [Infinity, -Infinity, Infinity, -Infinity];
    for (const x of boxes) { b[0] = Math.min(b[0], x[0]); b[1] = Math.max(b[1], x[1]); b[2] = Math.min(b[2], x[2]); b[3] = Math.max(b[3], x[3]); }
    return b;
  }
  // a region's cells as a bit mask over its bounding box (made once per answer), with canvases
  const masks = new WeakMap();  // answer or brush boxes -> its mask (kept out of the state, which tests read)
  function regionMask(a, shape) {
    if (masks.has(a.boxes)) return masks.get(a.boxes);
    const bb = a.bbox || bboxOf(a.boxes);
    if (!bb || shape.length !== 2 || (bb[1] - bb[0]) * (bb[3] - bb[2]) > MAX_MASK) { masks.set(a.boxes, null); return null; }
    const m = {r0: bb[0], c0: bb[2], h: bb[1] - bb[0], w: bb[3] - bb[2], canvases: {}};
    m.bits = new Uint8Array(m.h * m.w);
    for (const b of a.boxes) for (let r = b[0]; r < b[1]; r++) m.bits.fill(1, (r - m.r0) * m.w + b[2] - m.c0, (r - m.r0) * m.w + b[3] - m.c0);
    const paint = (colour, edgeOnly) => {
      const key = `${colour}|${edgeOnly}`;
      if (m.canvases[key]) return m.canvases[key];
      const c = document.createElement("canvas"); c.width = m.w; c.height = m.h;
      const ctx = c.getContext("2d"); ctx.fillStyle = colour; ctx.fillRect(0, 0, 1, 1);
      const rgba = ctx.getImageData(0, 0, 1, 1).data; ctx.clearRect(0, 0, 1, 1);
      const img = ctx.createImageData(m.w, m.h), px = img.data, B = m.bits;
      for (let r = 0; r < m.h; r++) for (let col = 0; col < m.w; col++) {
        const i = r * m.w + col;
        if (!B[i]) continue;
        if (edgeOnly && r > 0 && r < m.h - 1 && col > 0 && col < m.w - 1 && B[i - 1] && B[i + 1] && B[i - m.w] && B[i + m.w]) continue;
        px.set(rgba, 4 * i);
        if (edgeOnly) px[4 * i + 3] = 255;
      }
      ctx.putImageData(img, 0, 0);
      return (m.canvases[key] = c);
    };
    m.fill = (colour) => paint(colour, false);
    m.edge = (colour) => paint(colour, true);
    masks.set(a.boxes, m);
    return m;
  }

  // ---- linking: a side frame's view follows the main frame's ----
  // Same shape: the same window. Else, mapped through the lineage: the brush's bounding box in
  // the main node onto the answer's bounding box in the side node, axis by axis.
  function linkedView(f) {
    const main = state.frames.main;
    if (!main) { f.fit(); f.mapped = false; return; }
    f.size();
    const [r0, r1, c0, c1] = main.window();
    const same = f.n.shape[0] === main.n.shape[0] && f.n.shape[1] === main.n.shape[1];
    let map = null;
    if (same) map = {ar: 1, br: 0, ac: 1, bc: 0};
    else {
      const a = state.answers[f.n.name], src = state.selNode === main.n.name ? bboxOf(state.boxes) :
        (state.answers[main.n.name] ? state.answers[main.n.name].bbox : null);
      const dst = a && a.bbox;
      if (src && dst) {
        const ar = (dst[1] - dst[0]) / (src[1] - src[0]), ac = (dst[3] - dst[2]) / (src[3] - src[2]);
        map = {ar, br: dst[0] - ar * src[0], ac, bc: dst[2] - ac * src[2]};
      }
    }
    if (!map) { f.fit(); f.mapped = false; return; }
    const R0 = map.ar * r0 + map.br, R1 = map.ar * r1 + map.br, C0 = map.ac * c0 + map.bc, C1 = map.ac * c1 + map.bc;
    f.cy = (R0 + R1) / 2; f.cx = (C0 + C1) / 2;
    f.s = Math.min(f.w / Math.max(1e-9, C1 - C0), f.h / Math.max(1e-9, R1 - R0));
    f.map = map; f.mapped = true;
    if (main.cross) f.cross = [map.ar * main.cross[0] + map.br, map.ac * main.cross[1] + map.bc]; else f.cross = null;
  }

  let pending = false;
  function redrawAll() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      const main = state.frames.main;
      if (main && main.paint) main.paint();
      for (const f of Object.values(state.frames)) if (f !== main && f.paint) { linkedView(f); f.paint(); }
      paintColourBar();
      saveUrl();
    });
  }
  function redrawNode() { redrawAll(); }

  // ---- the colour bar of the main frame ----
  function paintColourBar() {
    const main = state.frames.main, d = window.devicePixelRatio || 1;
    const n = main ? main.n : null, l = n && n.display === "image" ? limitsNow(n) : null;
    cbar.style.visibility = l ? "visible" : "hidden";  // keeps its place: the main frame keeps its size
    if (!l) return;
    const r = cbar.getBoundingClientRect(), W = Math.max(50, Math.round(r.width)), H = 40;
    cbar.width = W * d; cbar.height = H * d;
    const ctx = cbar.getContext("2d"); ctx.setTransform(d, 0, 0, d, 0, 0);
    ctx.fillStyle = "#15171a"; ctx.fillRect(0, 0, W, H);
    const x0 = 52, x1 = W - 8, lut = COLORMAPS[state.settings.cmap], st = STRETCHES[state.settings.stretch];
    for (let x = x0; x < x1; x++) {
      const c = 3 * Math.round(255 * Math.min(1, Math.max(0, st((x - x0) / (x1 - x0 - 1)))));
      ctx.fillStyle = `rgb(${lut[c]},${lut[c + 1]},${lut[c + 2]})`; ctx.fillRect(x, 4, 1, 14);
    }
    ctx.strokeStyle = "#777"; ctx.strokeRect(x0 - 0.5, 3.5, x1 - x0 + 1, 15);
    ctx.fillStyle = "#bbb"; ctx.font = "11px system-ui, sans-serif"; ctx.textBaseline = "top"; ctx.textAlign = "center";
    const step = niceStep(l.hi - l.lo, (x1 - x0) / 90);
    for (let v = Math.ceil(l.lo / step) * step; v <= l.hi + 1e-12; v += step) {
      const x = x0 + (v - l.lo) / (l.hi - l.lo) * (x1 - x0);
      ctx.fillRect(x, 18, 1, 4); ctx.fillText(fmtValue(Number(v.toPrecision(12)), 4), x, 23);
    }
    ctx.textAlign = "left"; ctx.fillText(state.settings.limits, 2, 6);
    cbar.dataset.lo = l.lo; cbar.dataset.hi = l.hi;
  }

  // ---- the graph ----
  let graphNodes = {};
  function drawGraph() {
    graphSvg.innerHTML = "";
    graphNodes = {};
    const layer = {}, names = state.nodes.map((n) => n.name);
    for (const n of state.nodes) layer[n.name] = Math.max(-1, ...n.inputs.filter((i) => i in layer).map((i) => layer[i])) + 1;
    const layers = [];
    for (const n of state.nodes) (layers[layer[n.name]] = layers[layer[n.name]] || []).push(n.name);
    const x = {}, NW = 84, NH = 22, GX = 8, GY = 20;
    const width = Math.max(...layers.map((l) => l.length)) * (NW + GX) + GX;
    layers.forEach((names, k) => {
      if (k) names.sort((a, b) => bary(a) - bary(b));
      const row = names.length * (NW + GX) - GX, start = (width - row) / 2;
      names.forEach((nm, i) => { x[nm] = start + i * (NW + GX); });
    });
    function bary(nm) { const ins = node(nm).inputs.filter((i) => i in x); return ins.length ? ins.reduce((s, i) => s + x[i], 0) / ins.length : 0; }
    const y = (nm) => 6 + layer[nm] * (NH + GY);
    graphSvg.setAttribute("viewBox", `0 0 ${width} ${layers.length * (NH + GY) + 6}`);
    graphSvg.style.height = `${(layers.length * (NH + GY) + 6) * Math.min(1.4, 250 / width)}px`;
    const edges = svg("g", {class: "szv-edges"}, graphSvg), boxes = svg("g", {}, graphSvg);
    for (const n of state.nodes) for (const i of n.inputs) {
      if (!(i in x)) continue;
      const x1 = x[i] + NW / 2, y1 = y(i) + NH, x2 = x[n.name] + NW / 2, y2 = y(n.name);
      const p = svg("path", {d: `M${x1},${y1} C${x1},${(y1 + y2) / 2} ${x2},${(y1 + y2) / 2} ${x2},${y2}`, class: "szv-edge"}, edges);
      p.dataset.from = i; p.dataset.to = n.name;
    }
    for (const nm of names) {
      const n = node(nm), g = svg("g", {class: `szv-gnode szv-${n.kind === "input" ? "input" : "op"}`, transform: `translate(${x[nm]},${y(nm)})`}, boxes);
      g.dataset.node = nm;
      svg("rect", {width: NW, height: NH, rx: 4}, g);
      const t = svg("text", {x: NW / 2, y: NH / 2 + 4, "text-anchor": "middle"}, g);
      t.textContent = nm.length > 13 ? nm.slice(0, 12) + "\u2026" : nm;
      const tip = svg("title", {}, g);
      tip.textContent = `${nm}: ${n.operator === "-" ? "input" : n.operator}, ${n.shape.join(" \u00d7 ") || "scalar"} ${n.dtype}` +
        (n.strategies.length ? `, stored: ${n.strategies.join(", ")}` : "");
      g.addEventListener("click", () => show(nm));
      graphNodes[nm] = g;
    }
    litGraph();
  }
  function litGraph() {
    const q = search.value.trim().toLowerCase();
    for (const [nm, g] of Object.entries(graphNodes)) {
      const a = state.answers[nm];
      g.classList.toggle("szv-main-node", state.main === nm);
      g.classList.toggle("szv-brushed", state.selNode === nm && state.boxes.length > 0);
      g.classList.toggle("szv-lit-backward", !!a && a.direction === "backward" && a.cells > 0);
      g.classList.toggle("szv-lit-forward", !!a && a.direction === "forward" && a.cells > 0);
      g.classList.toggle("szv-dim", !!q && !nm.toLowerCase().includes(q));
      g.classList.toggle("szv-match", !!q && nm.toLowerCase().includes(q));
    }
    const on = (nm, dir) => (state.selNode === nm && state.boxes.length > 0) ||
      (state.answers[nm] && state.answers[nm].direction === dir && state.answers[nm].cells > 0);
    for (const p of graphSvg.querySelectorAll(".szv-edge")) {
      const f = p.dataset.from, t = p.dataset.to;
      const back = on(t, "backward") && state.answers[f] && state.answers[f].direction === "backward" && state.answers[f].cells > 0;
      const fwd = on(f, "forward") && state.answers[t] && state.answers[t].direction === "forward" && state.answers[t].cells > 0;
      p.setAttribute("class", `szv-edge${back ? " szv-lit-backward" : ""}${fwd ? " szv-lit-forward" : ""}`);
    }
  }

  // ---- the main frame ----
  async function show(name, view) {
    const n = node(name);
    if (!n) return;
    state.main = name;
    mainTitle.textContent = `${name} \u00b7 ${n.operator === "-" ? "input" : n.operator} \u00b7 ${n.shape.join(" \u00d7 ") || "scalar"} \u00b7 ${n.dtype}` +
      (n.wcs ? " \u00b7 WCS" : "");
    mainBox.querySelectorAll(".szv-value, .szv-line").forEach((e) => e.remove());
    if (is2d(n)) {
      mainCanvas.style.display = "";
      const old = state.frames.main, f = new Frame(n, mainCanvas, "main");
      state.frames.main = f;
      f.fit();
      if (view) { f.cx = view[0]; f.cy = view[1]; f.s = view[2]; }
      else if (old && old.n.shape[0] === n.shape[0] && old.n.shape[1] === n.shape[1]) { f.cx = old.cx; f.cy = old.cy; f.s = old.s; }
      limitsOf(n);
      if (n.wcs && !state.compass[name]) api.json(`api/compass/${encodeURIComponent(name)}`).then((c) => { state.compass[name] = c; redrawAll(); }).catch(() => {});
    } else {
      mainCanvas.style.display = "none";
      delete state.frames.main;
      if (n.shape.length <= 1 || n.shape.every((k) => k === 1)) showLine(n, mainBox, true);
      else el("div", "szv-value szv-note", `${n.shape.join(" \u00d7 ")}: the viewer draws nodes of one or two axes; ` +
        "its lineage is counted in the side panel and can be exported", mainBox);
    }
    syncControls();
    litGraph();
    buildSide();
    redrawAll();
  }
  async function showLine(n, parent, big) {
    try {
      const got = state.lines[n.name] || (state.lines[n.name] = await api.json(`api/line/${encodeURIComponent(n.name)}`));
      if (got.kind === "scalar") {
        const v = el("div", "szv-value", fmtValue(got.value, 7), parent);
        v.dataset.node = n.name; v.title = String(got.value);
        if (big) el("div", "szv-value-note", `${n.name}: one value`, v);
        return;
      }
      const c = el("canvas", "szv-line", null, parent);
      c.dataset.node = n.name;
      requestAnimationFrame(() => plotLine(c, got, state.answers[n.name] || (state.selNode === n.name ? {boxes: state.boxes, direction: "brush"} : null)));
    } catch (e) { fail(e, `node ${n.name}`); }
  }
  function plotLine(c, got, answer) {
    const d = window.devicePixelRatio || 1, r = c.getBoundingClientRect(), W = Math.max(100, r.width), H = Math.max(60, r.height);
    c.width = W * d; c.height = H * d;
    const ctx = c.getContext("2d"); ctx.setTransform(d, 0, 0, d, 0, 0);
    ctx.fillStyle = "#0b0c0e"; ctx.fillRect(0, 0, W, H);
    const m = {l: 52, r: 8, t: 8, b: 24}, w = W - m.l - m.r, h = H - m.t - m.b;
    const fin = got.lo.concat(got.hi).filter((v) => v !== null);
    const lo = Math.min(...fin), hi = Math.max(...fin), span = hi - lo || 1;
    const X = (i) => m.l + i / Math.max(1, got.n - 1) * w, Y = (v) => m.t + h - (v - lo) / span * h;
    if (answer && answer.boxes) {
      ctx.fillStyle = FILL[answer.direction] || FILL.brush;
      for (const b of answer.boxes.slice(0, MAX_BOXES_DRAWN)) ctx.fillRect(X(b[0]) - 1, m.t, Math.max(2, X(b[1]) - X(b[0])), h);
    }
    ctx.strokeStyle = "#e6e6e6"; ctx.lineWidth = 1; ctx.beginPath();
    got.x.forEach((i, k) => { if (got.lo[k] === null) return; ctx.lineTo(X(i), Y(got.lo[k])); if (got.hi[k] !== got.lo[k]) ctx.lineTo(X(i), Y(got.hi[k])); });
    ctx.stroke();
    ctx.strokeStyle = "#777"; ctx.strokeRect(m.l - 0.5, m.t - 0.5, w + 1, h + 1);
    ctx.fillStyle = "#bbb"; ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    const ys = niceStep(span, h / 40);
    for (let v = Math.ceil(lo / ys) * ys; v <= hi; v += ys) ctx.fillText(fmtValue(Number(v.toPrecision(10)), 4), m.l - 5, Y(v));
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    const xs = Math.max(1, niceStep(got.n, w / 80));
    for (let i = 0; i < got.n; i += xs) ctx.fillText(String(i), X(i), m.t + h + 5);
  }

  // ---- side frames: the nodes the lineage reaches ----
  function buildSide() {
    frameList.innerHTML = "";
    for (const k of Object.keys(state.frames)) if (k !== "main") delete state.frames[k];
    const reached = Object.entries(state.answers).filter(([nm, a]) => a.cells > 0 && nm !== state.main);
    if (state.selNode && state.selNode !== state.main) reached.unshift([state.selNode, {direction: "brush"}]);
    sideHead.textContent = reached.length ? `Lineage: ${reached.length} node(s) (click one to put it in the main frame)` :
      "Brush an image: the nodes its lineage reaches appear here.";
    const rank = (nm, a) => (a.direction === "brush" ? 0 : a.direction === "backward" ? (node(nm).kind === "input" ? 1 : 2) : 3);
    reached.sort((p, q) => rank(...p) - rank(...q));
    for (const [nm, a] of reached) {
      const n = node(nm), card = el("div", `szv-frame szv-${a.direction}`, null, frameList);
      card.dataset.node = nm;
      const head = el("div", "szv-frame-head", null, card);
      el("b", null, nm, head);
      el("span", null, a.direction === "brush" ? " brushed" : ` ${a.direction} \u00b7 ${fmtInt(a.cells)} cell(s)`, head);
      card.addEventListener("click", () => show(nm));
      if (is2d(n)) {
        const c = el("canvas", "szv-frame-canvas", null, card);
        const f = new Frame(n, c, "side");
        state.frames[nm] = f;
        c.addEventListener("wheel", (ev) => {  // zooms the main frame about the same place: the frames stay linked
          const main = state.frames.main;
          if (!main || !f.mapped) return;
          ev.preventDefault();
          const r = c.getBoundingClientRect(), [rs, cs] = f.toCell(ev.clientX - r.left, ev.clientY - r.top);
          zoomMain((rs - f.map.br) / f.map.ar, (cs - f.map.bc) / f.map.ac, ev.deltaY < 0 ? 1.25 : 0.8);
        }, {passive: false});
        c.addEventListener("mousemove", (ev) => {  // the crosshair follows in every frame; the readout is this node's
          const main = state.frames.main, r = c.getBoundingClientRect(), [rs, cs] = f.toCell(ev.clientX - r.left, ev.clientY - r.top);
          if (main && f.mapped) main.cross = [(Math.floor(rs) + 0.5 - f.map.br) / f.map.ar, (Math.floor(cs) + 0.5 - f.map.bc) / f.map.ac];
          redrawAll();
          if (rs >= 0 && cs >= 0 && rs < n.shape[0] && cs < n.shape[1]) askPixel(nm, Math.floor(rs), Math.floor(cs));
        });
        limitsOf(n);
      } else if (n.shape.length <= 1 || n.shape.every((k) => k === 1)) showLine(n, card, false);
      else el("div", "szv-note", `${n.shape.length}-D: ${fmtInt(a.cells || 0)} cell(s)`, card);
    }
    fillStatsTargets();
  }

  // ---- interaction on the main frame ----
  let drag = null;
  mainCanvas.addEventListener("contextmenu", (ev) => ev.preventDefault());
  const pos = (ev) => { const r = mainCanvas.getBoundingClientRect(); return [ev.clientX - r.left, ev.clientY - r.top]; };
  mainCanvas.addEventListener("mousedown", (ev) => {
    const f = state.frames.main;
    if (!f) return;
    ev.preventDefault();
    const [x, y] = pos(ev), cell = f.toCell(x, y);
    if (ev.shiftKey || ev.button !== 0) { drag = {pan: true, x, y, cx: f.cx, cy: f.cy}; return; }
    drag = {x, y, start: cell, pts: [cell]};
  });
  const onMove = (ev) => {
    const f = state.frames.main;
    if (!f || !drag) return;
    const [x, y] = pos(ev), cell = f.toCell(x, y);
    if (drag.pan) {
      f.cx = drag.cx - (x - drag.x) / f.s;
      f.cy = drag.cy + (f.flip() ? 1 : -1) * (y - drag.y) / f.s;
    } else {
      drag.pts.push(cell);
      drag.far = Math.max(drag.far || 0, Math.abs(x - drag.x) + Math.abs(y - drag.y));
      f.band = bandShape(drag, cell);
    }
    redrawAll();
  };
  const onUp = (ev) => {
    const f = state.frames.main;
    if (!f || !drag) return;
    const d = drag; drag = null; f.band = null;
    if (d.pan) return;
    const [x, y] = pos(ev), moved = Math.max(d.far || 0, Math.abs(x - d.x) + Math.abs(y - d.y)) > 3;
    let s;
    if (!moved) { const [r, c] = d.start.map(Math.floor); s = {t: "box", r0: r, r1: r + 1, c0: c, c1: c + 1}; }
    else s = bandShape(d, f.toCell(x, y), true);
    if (s) brushShapes([s], f.n.name, state.settings.mode); else redrawAll();
  };
  window.addEventListener("mousemove", onMove);
  window.addEventListener("mouseup", onUp);
  function bandShape(d, cell, final) {
    const t = state.settings.tool, a = d.start;
    if (t === "box") {
      return {t: "box", r0: Math.floor(Math.min(a[0], cell[0])), r1: Math.floor(Math.max(a[0], cell[0])) + 1,
        c0: Math.floor(Math.min(a[1], cell[1])), c1: Math.floor(Math.max(a[1], cell[1])) + 1};
    }
    if (t === "circle") return {t: "circle", r: a[0], c: a[1], rad: Math.hypot(cell[0] - a[0], cell[1] - a[1])};
    return {t: "poly", pts: d.pts.slice(), open: !final};
  }
  function zoomMain(r, c, factor) {  // zoom the main frame by factor, cell (r, c) staying in place
    const f = state.frames.main, [x, y] = f.toScreen(r, c);
    f.s = Math.min(256, Math.max(f.fitScale() / 4, f.s * factor));
    const [r2, c2] = f.toCell(x, y);
    f.cx += c - c2; f.cy += r - r2;
    redrawAll();
  }
  mainCanvas.addEventListener("wheel", (ev) => {
    const f = state.frames.main;
    if (!f) return;
    ev.preventDefault();
    const [x, y] = pos(ev), [r, c] = f.toCell(x, y);
    zoomMain(r, c, ev.deltaY < 0 ? 1.25 : 0.8);
  }, {passive: false});
  mainCanvas.addEventListener("dblclick", () => { const f = state.frames.main; if (f) { f.fit(); redrawAll(); } });
  let lastAsk = 0, askTimer = null, readSeq = 0;
  mainCanvas.addEventListener("mouseleave", () => { const f = state.frames.main; if (f) { f.cross = null; redrawAll(); } });
  mainCanvas.addEventListener("mousemove", (ev) => {
    const f = state.frames.main;
    if (!f) return;
    const [x, y] = pos(ev), [rf, cf] = f.toCell(x, y), r = Math.floor(rf), c = Math.floor(cf);
    f.cross = [r + 0.5, c + 0.5];
    redrawAll();
    if (r < 0 || c < 0 || r >= f.n.shape[0] || c >= f.n.shape[1]) return;
    askPixel(f.n.name, r, c);
  });
  function askPixel(name, r, c) {  // at most one value request per 100 ms, the last position always asked
    clearTimeout(askTimer);
    const ask = () => { lastAsk = Date.now(); readPixel(name, r, c); };
    if (Date.now() - lastAsk > 100) ask(); else askTimer = setTimeout(ask, 100);
  }
  async function readPixel(name, r, c) {
    const seq = ++readSeq;
    try {
      const p = await api.json(`api/pixel/${encodeURIComponent(name)}?row=${r}&col=${c}`);
      if (seq !== readSeq) return p;
      const where = astroOn() ? `x ${c + 1}  y ${r + 1}` : `row ${r}  col ${c}`;
      let text = `${name}  ${where}  value ${fmtValue(p.value, 6)}`;
      if (p.ra !== undefined) text += `  RA ${sexagesimal(p.ra, true)}  Dec ${sexagesimal(p.dec, false)}  (${p.ra.toFixed(5)}\u00b0, ${p.dec.toFixed(5)}\u00b0)`;
      state.readout = text; readout.textContent = text;
      return p;
    } catch (e) { return null; }
  }
  controller.readPixel = readPixel;

  // ---- brushing ----
  async function brushShapes(shapes, name, mode) {
    const n = node(name);
    if (!is2d(n)) return;
    state.shapes = mode === "add" && state.selNode === name ? state.shapes.concat(shapes) : shapes.slice();
    state.selNode = name;
    state.boxes = shapesToBoxes(state.shapes, n.shape[0], n.shape[1]);
    const boxes = state.boxes;
    if (opts.onSelect) opts.onSelect({node: name, boxes: boxes.map((b) => b.slice())});
    state.answers = {};
    if (!boxes.length) { status("the selection holds no cell centre; draw a larger shape"); buildSide(); litGraph(); redrawAll(); return; }
    const cells = boxes.reduce((s, b) => s + (b[1] - b[0]) * (b[3] - b[2]), 0);
    state.request = {node: name, boxes};
    status(`tracing ${fmtInt(cells)} cell(s) of ${name}\u2026`);
    redrawAll();
    const t0 = performance.now();
    try {
      const [back, fwd] = await Promise.all(["backward", "forward"].map((direction) =>
        api.post("api/lineage", {node: name, direction, boxes, to: null}).then((r) => r.json())));
      if (state.request.boxes !== boxes) return;
      for (const [direction, got] of [["backward", back], ["forward", fwd]]) {
        for (const [nm, a] of Object.entries(got.answers)) state.answers[nm] = {direction, ...a};
      }
      state.brushes++;
      const nb = Object.values(back.answers).filter((a) => a.cells).length, nf = Object.values(fwd.answers).filter((a) => a.cells).length;
      status(`brushed ${fmtInt(cells)} cell(s) of ${name}: backward lineage on ${nb} node(s) in ${back.ms.toFixed(0)} ms, ` +
        `forward on ${nf} in ${fwd.ms.toFixed(0)} ms (server); ${(performance.now() - t0).toFixed(0)} ms in all`);
      fillExport();
      buildSide();
      litGraph();
      redrawAll();
      loadStats();
    } catch (e) { fail(e, "lineage"); }
  }
  function clearSelection() {
    state.shapes = []; state.boxes = []; state.selNode = null; state.request = null; state.answers = {}; state.stats = null;
    expBtn.disabled = true; expTarget.innerHTML = ""; statsPane.innerHTML = "";
    buildSide(); litGraph(); redrawAll(); status("cleared");
    if (opts.onSelect) opts.onSelect(null);
  }
  function fillExport() {
    expTarget.innerHTML = "";
    const o = el("option", null, `${state.selNode} (the brush)`, expTarget); o.value = state.selNode;
    for (const [nm, a] of Object.entries(state.answers)) if (a.cells) { const p = el("option", null, `${nm} (${a.direction})`, expTarget); p.value = nm; }
    expBtn.disabled = false;
  }
  async function exportAnswer() {
    if (!state.request) return;
    const target = expTarget.value, format = expFormat.value, a = state.answers[target];
    const bodyJson = {node: state.request.node, boxes: state.request.boxes, direction: a ? a.direction : "backward", target, format};
    try {
      const res = await api.post("api/export", bodyJson);
      const blob = await res.blob(), m = /filename="([^"]+)"/.exec(res.headers.get("Content-Disposition") || "");
      const fname = m ? m[1] : `${target}.${format}`;
      download(blob, fname);
      state.lastExport = {name: fname, bytes: blob.size, format, target};
      status(`exported ${fname} (${fmtInt(blob.size)} bytes)`);
    } catch (e) { state.lastExport = {error: e.message, format, target}; fail(e, "export"); }
  }
  function download(blob, fname) {
    const link = el("a", null, null, document.body);
    link.href = URL.createObjectURL(blob); link.download = fname; link.click(); link.remove();
  }

  // ---- statistics of the brushed cells and of the lineage in one node ----
  let statsTarget = null;
  function fillStatsTargets() {
    const reach = Object.entries(state.answers).filter(([, a]) => a.cells > 0);
    if (!reach.length) { statsTarget = null; return; }
    if (!statsTarget || !state.answers[statsTarget]) {
      const first = reach.find(([nm, a]) => a.direction === "backward" && node(nm).kind === "input") || reach[0];
      statsTarget = first[0];
    }
  }
  async function loadStats() {
    fillStatsTargets();
    if (!state.request) { statsPane.innerHTML = ""; return; }
    const a = statsTarget && state.answers[statsTarget], request = state.request;
    // the cells themselves when the page has them (no second walk); the lineage body otherwise
    const cellsOf = (name, boxes) => api.post("api/stats", {node: name, boxes}).then((r) => r.json()).then((x) => x.brush);
    const viaWalk = () => api.post("api/stats", {node: request.node, boxes: request.boxes, direction: a.direction, to: [statsTarget]})
      .then((r) => r.json()).then((x) => x.answers[statsTarget]);
    try {
      const [brush, target] = await Promise.all([cellsOf(request.node, request.boxes),
        a ? cellsOf(statsTarget, a.boxes).catch(viaWalk) : Promise.resolve(null)]);
      const got = {brush, answers: target ? {[statsTarget]: target} : {}};
      if (state.request !== request) return;
      state.stats = got;
      statsPane.innerHTML = "";
      const headRow = el("div", "szv-stats-head", "Statistics: brushed cells and ", statsPane);
      const sel = el("select", "szv-stats-target", null, headRow);
      for (const [nm, x] of Object.entries(state.answers)) if (x.cells) { const o = el("option", null, `${x.direction} lineage in ${nm}`, sel); o.value = nm; }
      sel.value = statsTarget || "";
      sel.addEventListener("change", () => { statsTarget = sel.value; loadStats(); });
      const cols = [[`${request.node} (brush)`, got.brush, "brush"]];
      if (a && got.answers[statsTarget]) cols.push([`${statsTarget} (${a.direction})`, got.answers[statsTarget], a.direction]);
      const tbl = el("div", "szv-stat-table", null, statsPane);
      tbl.style.gridTemplateColumns = `auto repeat(${cols.length}, 1fr)`;
      el("span", "szv-k", "", tbl);
      for (const [label, , kind] of cols) el("span", `szv-stat-title szv-${kind}`, label, tbl);
      for (const k of ["count", "min", "max", "mean", "median", "std"]) {
        el("span", "szv-k", k, tbl);
        for (const [, s2, kind] of cols) {
          const v = el("span", "szv-v", k === "count" ? fmtInt(s2[k]) + (s2.finite !== s2.count ? ` (${fmtInt(s2.finite)} finite)` : "") : fmtValue(s2[k], 5), tbl);
          v.dataset.stat = `${kind}-${k}`;
        }
      }
      const hists = el("div", "szv-hists", null, statsPane);
      for (const [, s2, kind] of cols) histogram(el("canvas", "szv-hist", null, hists), s2, kind);
    } catch (e) { fail(e, "statistics"); }
  }
  function histogram(c, s, kind) {
    requestAnimationFrame(() => {
      const d = window.devicePixelRatio || 1, W = Math.max(60, c.getBoundingClientRect().width), H = 60;
      c.width = W * d; c.height = H * d;
      const ctx = c.getContext("2d"); ctx.setTransform(d, 0, 0, d, 0, 0);
      ctx.fillStyle = "#0b0c0e"; ctx.fillRect(0, 0, W, H);
      const counts = s.hist.counts, top = Math.max(1, ...counts), bw = W / Math.max(1, counts.length);
      ctx.fillStyle = kind === "brush" ? "#d0d0d0" : OVERLAY[kind];
      counts.forEach((n, i) => { const hh = (H - 14) * n / top; ctx.fillRect(i * bw, H - 12 - hh, Math.max(1, bw - 0.5), hh); });
      ctx.fillStyle = "#aaa"; ctx.font = "10px system-ui, sans-serif"; ctx.textBaseline = "bottom";
      if (s.hist.edges.length) {
        ctx.textAlign = "left"; ctx.fillText(fmtValue(s.hist.edges[0], 4), 1, H);
        ctx.textAlign = "right"; ctx.fillText(fmtValue(s.hist.edges[s.hist.edges.length - 1], 4), W - 1, H);
      }
    });
  }

  // ---- a catalogue: markers, and a table whose rows brush their object ----
  function loadCatalog(text) {
    try {
      const cat = parseCatalog(text);
      if (!cat.node || !node(cat.node)) cat.node = state.main;
      if (!is2d(node(cat.node))) throw new Error(`the catalogue's objects need a 2-D label node; show it first (${cat.node} is not)`);
      state.catalog = cat;
      drawCatalog();
      status(`catalogue of ${fmtInt(cat.rows.length)} object(s) of ${cat.node}: click a row to brush its object`);
      redrawAll();
    } catch (e) { fail(e, "catalogue"); }
  }
  function drawCatalog() {
    catalogPane.innerHTML = "";
    const cat = state.catalog;
    if (!cat) return;
    const head = el("div", "szv-stats-head", `Catalogue of ${cat.node}: ${fmtInt(cat.rows.length)} object(s)`, catalogPane);
    const close = el("button", null, "\u00d7", head); close.type = "button"; close.title = "remove the catalogue";
    close.addEventListener("click", () => { state.catalog = null; drawCatalog(); redrawAll(); });
    const extra = cat.columns.filter((c) => !["label", "centroid_r", "centroid_c", "bbox_r0", "bbox_r1", "bbox_c0", "bbox_c1"].includes(c));
    const table = el("table", "szv-cat-table", null, el("div", "szv-cat-scroll", null, catalogPane));
    const hr = el("tr", null, null, el("thead", null, null, table));
    for (const h of ["label", astroOn() ? "x" : "col", astroOn() ? "y" : "row", ...extra]) el("th", null, h, hr);
    const tbody = el("tbody", null, null, table);
    for (const row of cat.rows) {
      const tr = el("tr", null, null, tbody);
      tr.dataset.label = String(row.label);
      const x = row.centroid_c + (astroOn() ? 1 : 0), y = row.centroid_r + (astroOn() ? 1 : 0);
      for (const v of [row.label, fmtValue(x, 5), fmtValue(y, 5), ...extra.map((c) => fmtValue(row[c], 4))]) el("td", null, String(v), tr);
      tr.addEventListener("click", () => brushObject(row));
    }
  }
  async function brushObject(row) {
    const cat = state.catalog, n = node(cat.node);
    const hasBox = ["bbox_r0", "bbox_r1", "bbox_c0", "bbox_c1"].every((k) => Number.isFinite(row[k]));
    const q = `label=${encodeURIComponent(row.label)}` + (hasBox ? `&bbox=${row.bbox_r0},${row.bbox_r1},${row.bbox_c0},${row.bbox_c1}` : "");
    try {
      const got = await api.json(`api/object/${encodeURIComponent(cat.node)}?${q}`);
      if (!got.boxes.length) { status(`object ${row.label} has no cells in ${cat.node}`, true); return; }
      if (state.main !== cat.node) await show(cat.node);
      const f = state.frames.main;
      if (f && f.n === n) { f.cx = row.centroid_c + 0.5; f.cy = row.centroid_r + 0.5; }
      catalogPane.querySelectorAll("tr.szv-on").forEach((t) => t.classList.remove("szv-on"));
      const tr = catalogPane.querySelector(`tr[data-label="${CSS.escape(String(row.label))}"]`);
      if (tr) tr.classList.add("szv-on");
      await brushShapes(got.boxes.map((b) => ({t: "box", r0: b[0], r1: b[1], c0: b[2], c1: b[3], o: 1})), cat.node, state.settings.mode);
    } catch (e) { fail(e, `object ${row.label}`); }
  }
  catalogBtn.addEventListener("click", () => catalogFile.click());
  catalogFile.addEventListener("change", async () => {
    const file = catalogFile.files[0];
    if (file) loadCatalog(await file.text());
    catalogFile.value = "";
  });
  controller.loadCatalog = loadCatalog;

  // ---- controls ----
  function syncControls() {
    for (const [t, b] of Object.entries(toolButtons)) b.classList.toggle("szv-on", state.settings.tool === t);
    modeSel.value = state.settings.mode; limitsSel.value = state.settings.limits; stretchSel.value = state.settings.stretch;
    cmapSel.value = state.settings.cmap; outline.checked = state.settings.outline; astro.checked = !!state.settings.astro;
  }
  modeSel.addEventListener("change", () => { state.settings.mode = modeSel.value; saveUrl(); });
  limitsSel.addEventListener("change", () => {
    state.settings.limits = limitsSel.value;
    for (const f of Object.values(state.frames)) limitsOf(f.n);  // the others as they are shown
    redrawAll();
  });
  stretchSel.addEventListener("change", () => { state.settings.stretch = stretchSel.value; redrawAll(); });
  cmapSel.addEventListener("change", () => { state.settings.cmap = cmapSel.value; redrawAll(); });
  outline.addEventListener("change", () => { state.settings.outline = outline.checked; redrawAll(); });
  astro.addEventListener("change", () => { state.settings.astro = astro.checked; drawCatalog(); redrawAll(); });
  search.addEventListener("input", () => {
    litGraph();
    const q = search.value.trim().toLowerCase(), hit = q && Object.keys(graphNodes).find((nm) => nm.toLowerCase().includes(q));
    if (hit) graphNodes[hit].scrollIntoView({block: "nearest"});
  });
  search.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter") return;
    const q = search.value.trim().toLowerCase();
    const hit = state.nodes.find((n) => n.name.toLowerCase() === q) || state.nodes.find((n) => n.name.toLowerCase().includes(q));
    if (hit) show(hit.name);
  });
  clearBtn.addEventListener("click", clearSelection);
  expBtn.addEventListener("click", exportAnswer);
  enlarge.addEventListener("click", () => { element.classList.toggle("szv-enlarged"); const f = state.frames.main; if (f) f.fit(); redrawAll(); });
  fitBtn.addEventListener("click", () => { const f = state.frames.main; if (f) { f.fit(); redrawAll(); } });
  regionBtn.addEventListener("click", () => regionFile.click());
  regionFile.addEventListener("change", async () => {
    const file = regionFile.files[0];
    if (file) loadRegions(await file.text());
    regionFile.value = "";
  });
  function loadRegions(text) {
    try { brushShapes(parseRegions(text), state.main, state.settings.mode); } catch (e) { fail(e, "regions"); }
  }
  controller.loadRegions = loadRegions;
  regionOut.addEventListener("click", () => {
    if (!state.shapes.length) { status("nothing brushed: draw or load a selection first", true); return; }
    const text = writeRegions(state.shapes);
    download(new Blob([text], {type: "text/plain"}), `${state.selNode}-brush.reg`);
    state.lastExport = {name: `${state.selNode}-brush.reg`, bytes: text.length, format: "reg-shapes", target: state.selNode};
  });
  const resize = new ResizeObserver(() => redrawAll());
  resize.observe(mainBox); resize.observe(side);

  // ---- state in the URL ----
  let restoring = false;
  function saveUrl() {
    if (!opts.urlState || restoring || !state.ready) return;
    const f = state.frames.main, p = new URLSearchParams();
    if (state.main) p.set("node", state.main);
    if (f) p.set("view", [f.cx, f.cy, f.s].map((v) => Number(v.toPrecision(6))).join(","));
    const s = state.settings;
    p.set("limits", s.limits); p.set("stretch", s.stretch); p.set("cmap", s.cmap); p.set("outline", s.outline ? "1" : "0");
    p.set("astro", s.astro ? "1" : "0"); p.set("tool", s.tool);
    if (state.shapes.length) { p.set("brush", state.selNode); p.set("shapes", JSON.stringify(state.shapes.map(roundShape))); }
    const hash = "#" + p.toString();
    if (location.hash !== hash) history.replaceState(null, "", hash);
  }
  function roundShape(s) {
    const r = (v) => Number(v.toFixed(3));
    if (s.t === "poly") return {t: "poly", pts: s.pts.map((q) => [r(q[0]), r(q[1])])};
    const out = {}; for (const [k, v] of Object.entries(s)) out[k] = typeof v === "number" ? r(v) : v; return out;
  }
  function readUrl() {
    if (!opts.urlState || !location.hash) return {};
    const p = new URLSearchParams(location.hash.slice(1)), s = state.settings, out = {};
    if (p.get("limits") && limitsSel.querySelector(`option[value="${CSS.escape(p.get("limits"))}"]`)) s.limits = p.get("limits");
    if (STRETCHES[p.get("stretch")]) s.stretch = p.get("stretch");
    if (COLORMAPS[p.get("cmap")]) s.cmap = p.get("cmap");
    if (p.has("outline")) s.outline = p.get("outline") === "1";
    if (p.has("astro")) s.astro = p.get("astro") === "1";
    if (toolButtons[p.get("tool")]) s.tool = p.get("tool");
    if (p.get("node") && node(p.get("node"))) out.node = p.get("node");
    const v = (p.get("view") || "").split(",").map(Number);
    if (v.length === 3 && v.every(Number.isFinite) && v[2] > 0) out.view = v;
    if (p.get("brush") && node(p.get("brush"))) {
      try { out.brush = p.get("brush"); out.shapes = JSON.parse(p.get("shapes")); } catch (e) { delete out.brush; }
    }
    return out;
  }

  // ---- start ----
  controller.ready = (async () => {
    try {
      const run = await api.json("api/run");
      store.textContent = ` ${run.workflow} \u00b7 ${run.store}`;
      if (opts.urlState) document.title = `subzero view: ${run.workflow}`;
      state.nodes = await api.json("api/nodes");
    } catch (e) { fail(e, "cannot load the run"); return; }
    for (const n of state.nodes) state.byName[n.name] = n;
    state.settings.astro = state.nodes.some((n) => n.wcs);  // DS9's conventions where the store has a WCS
    drawGraph();
    restoring = true;
    const saved = readUrl();
    syncControls();
    const last2d = state.nodes.filter(is2d).pop();  // the workflow's last image: usually its product
    const first = saved.node || (last2d || state.nodes[0]).name;
    await show(first, saved.view);
    restoring = false;
    state.ready = true;
    status("Draw on the main frame to trace a selection (lasso, box or circle; a click: one cell). Wheel: zoom, " +
      "shift-drag or right-drag: pan, double-click: fit. Click a node of the graph to show it.");
    if (saved.brush && Array.isArray(saved.shapes)) await brushShapes(saved.shapes, saved.brush, "replace");
    redrawAll();
  })();

  controller.show = show;
  controller.select = (shapes, name, mode) => brushShapes(shapes, name || state.main, mode || "replace");
  controller.selectBoxes = (boxes, name) => brushShapes(boxes.map((b) => ({t: "box", r0: b[0], r1: b[1], c0: b[2], c1: b[3]})), name || state.main, "replace");
  controller.selection = () => ({node: state.selNode, boxes: state.boxes.map((b) => b.slice())});
  controller.clear = clearSelection;
  controller.frame = (name) => state.frames[name === state.main ? "main" : name];
  controller.destroy = () => {
    window.removeEventListener("mousemove", onMove); window.removeEventListener("mouseup", onUp); resize.disconnect();
    element.innerHTML = "";
  };
  state.controller = controller;
  return controller;
}
