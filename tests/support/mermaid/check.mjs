// Parse Mermaid blocks with Mermaid itself (no browser): a JSON array of texts on stdin,
// one {ok, type | error} per text on stdout. jsdom supplies the DOM that mermaid's module expects.
import { readFileSync } from "node:fs";
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!doctype html><html><body></body></html>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
mermaid.initialize({ startOnLoad: false });
const out = [];
for (const text of JSON.parse(readFileSync(0, "utf8"))) {
  try {
    const parsed = await mermaid.parse(text);
    out.push({ ok: true, type: parsed.diagramType });
  } catch (e) {
    out.push({ ok: false, error: String((e && e.message) || e).slice(0, 500) });
  }
}
console.log(JSON.stringify(out));
