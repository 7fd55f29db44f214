// The notebook widget (anywidget): this file is appended to view.js to make the widget's module
// (subzero/view/widget.py, `widget_esm`), so `mount` below is view.js's. The page's code is
// mounted in the output cell; its requests go to Python over the widget's message channel,
// where the viewer's own app answers them; the brush is the synced trait `brush`.

// an api for `mount` over `model.send` / "msg:custom": a request is {kind: "request", id, method,
// path, body}; Python replies {kind: "reply", id, status, headers} with the body as buffers[0]
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
  const request = (path, body) => new Promise((resolve) => {
    const id = `${prefix}-${++next}`;
    waiting.set(id, resolve);
    model.send({kind: "request", id, method: body === undefined ? "GET" : "POST", path,
                body: body === undefined ? null : JSON.stringify(body)});
  });
  return {
    request,
    tile: (node, z, ty, tx) => request(`/tiles/${encodeURIComponent(node)}/${z}/${ty}/${tx}.png`).then(async (res) => {
      if (!res.ok) throw new Error(`tile ${node}/${z}/${ty}/${tx}: ${res.status}`);
      return URL.createObjectURL(await res.blob());
    }),
    close: () => model.off("msg:custom", onMessage),
  };
}

// a reply as the fetch-like response `mount` reads
function reply(msg, buffers) {
  const b = buffers && buffers.length ? buffers[0] : new ArrayBuffer(0);
  const bytes = b instanceof ArrayBuffer ? new Uint8Array(b) : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
  const headers = msg.headers || {};
  return {
    ok: msg.status >= 200 && msg.status < 300, status: msg.status, statusText: `HTTP ${msg.status}`,
    headers: {get: (name) => headers[name.toLowerCase()] ?? null},
    json: async () => JSON.parse(new TextDecoder().decode(bytes)),
    blob: async () => new Blob([bytes], {type: headers["content-type"] || "application/octet-stream"}),
  };
}

export default {
  render({model, el}) {
    const channel = channelApi(model);
    let last = "{}";  // the brush this view shows, as JSON: a change to it is not applied again
    const view = mount(el, {
      request: channel.request, tile: channel.tile,
      onBrush(req) {
        const value = req ? {node: req.node, boxes: req.boxes} : {};
        last = JSON.stringify(value);
        model.set("brush", value);
        model.save_changes();
      },
    });
    el.subzeroView = view.state;
    const apply = () => {
      const b = model.get("brush") || {};
      const key = JSON.stringify(b);
      if (key === last) return;
      last = key;
      if (b.node) view.brush(b.node, b.boxes); else view.clear();
    };
    model.on("change:brush", apply);
    apply();  // a brush set from Python before the widget was shown
    return () => { model.off("change:brush", apply); channel.close(); view.destroy(); };
  },
};
