// The notebook widget (anywidget): this file is appended to view.js to make the widget's module
// (subzero/view/widget.py, `widget_esm`), so `mount` below is view.js's. The page's code is
// mounted in the output cell; its requests go to Python over the widget's message channel,
// where the viewer's own app answers them; the brushed cells are the synced trait `brush`.

// a reply as the fetch-like response the page reads (.ok, .status, .headers.get, .json(), .blob(),
// .arrayBuffer())
function reply(msg, buffers) {
  const b = buffers && buffers.length ? buffers[0] : new ArrayBuffer(0);
  const bytes = b instanceof ArrayBuffer ? new Uint8Array(b) : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  const headers = msg.headers || {};
  return {
    ok: msg.status >= 200 && msg.status < 300, status: msg.status, statusText: `HTTP ${msg.status}`,
    headers: {get: (name) => headers[name.toLowerCase()] ?? null},
    json: async () => JSON.parse(new TextDecoder().decode(bytes)),
    blob: async () => new Blob([bytes], {type: headers["content-type"] || "application/octet-stream"}),
    arrayBuffer: async () => bytes.slice().buffer,  // a copy of its own: typed arrays over it are aligned
  };
}

// the api `mount` takes (json, post, bytes; as view.js's httpApi), over `model.send` and
// "msg:custom": a request is {kind: "request", id, method, path, body}; Python replies
// {kind: "reply", id, status, headers} with the body as buffers[0]
function channelApi(model) {
  const prefix = Math.random().toString(36).slice(2);
  const waiting = new Map();
  let next = 0;
  const onMessage = (msg, buffers) => {
    if (!msg || msg.kind !== "reply" || !waiting.has(msg.id)) return;
    const resolve = waiting.get(msg.id);
    waiting.delete(msg.id);
    resolve(reply(msg, buffers));
  };
  model.on("msg:custom", onMessage);
  const send = (path, body) => new Promise((resolve) => {
    const id = `${prefix}-${++next}`;
    waiting.set(id, resolve);
    model.send({kind: "request", id, method: body === undefined ? "GET" : "POST",
                path: path.startsWith("/") ? path : "/" + path, body: body === undefined ? null : JSON.stringify(body)});
  });
  return {
    ...apiOver(send),
    close: () => model.off("msg:custom", onMessage),
  };
}

export default {
  render({model, el}) {
    const channel = channelApi(model);
    const root = document.createElement("div");
    root.className = "szv-widget";
    el.appendChild(root);
    let last = "{}";       // the brush this view shows, as JSON: a change to it is not applied again
    let fromPython = false;  // a selection made for a brush set in Python is not sent back
    const view = mount(root, channel, {
      urlState: false,
      onSelect(sel) {
        if (fromPython) return;
        const value = sel && sel.boxes.length ? {node: sel.node, boxes: sel.boxes} : {};
        const key = JSON.stringify(value);
        if (key === last) return;
        last = key;
        model.set("brush", value);
        model.save_changes();
      },
    });
    el.subzeroView = view.state;
    const select = (run) => { fromPython = true; try { run(); } finally { fromPython = false; } };
    const apply = async () => {
      const b = model.get("brush") || {};
      const key = JSON.stringify(b);
      if (key === last) return;
      last = key;
      await view.ready;
      if (!b.node) { select(() => view.clear()); return; }
      if (view.state.main !== b.node) await view.show(b.node);
      if (JSON.stringify(model.get("brush") || {}) === key) select(() => view.selectBoxes(b.boxes, b.node));
    };
    model.on("change:brush", apply);
    apply();  // a brush set from Python before the widget was shown
    return () => { model.off("change:brush", apply); channel.close(); view.destroy(); };
  },
};
