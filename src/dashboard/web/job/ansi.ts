import { AnsiUp } from "ansi_up";

/**
 * A log's ANSI colours, made safe to show. ansi_up reads the escape sequences (SGR colours,
 * bold, OSC 8 links to http/https only) and escapes the text; its output is then read back
 * into plain segments (text, CSS classes, a few style properties, an http(s) link) that the
 * page renders as elements with text children. Nothing is ever set as HTML, so no line can
 * inject markup, and no inline style attribute is written, so the strict
 * Content-Security-Policy holds.
 */

/** One run of text with its look. */
export interface AnsiSegment {
  readonly text: string;
  /** ansi_up's colour classes, e.g. "ansi-red-fg" (the 16 colours; the theme colours them). */
  readonly classes: readonly string[];
  /** camelCase CSS properties (256/true colours, bold, faint, italic, underline). */
  readonly style: Readonly<Record<string, string>>;
  /** An OSC 8 link's target, http or https only. */
  readonly href?: string;
}

/** The style properties ansi_up writes, and the values each may take. */
const allowedStyles: Readonly<Record<string, { readonly prop: string; readonly value: RegExp }>> = {
  color: { prop: "color", value: /^rgb\(\d{1,3},\d{1,3},\d{1,3}\)$/ },
  "background-color": { prop: "backgroundColor", value: /^rgb\(\d{1,3},\d{1,3},\d{1,3}\)$/ },
  "font-weight": { prop: "fontWeight", value: /^bold$/ },
  opacity: { prop: "opacity", value: /^0\.\d+$/ },
  "font-style": { prop: "fontStyle", value: /^italic$/ },
  "text-decoration": { prop: "textDecoration", value: /^underline$/ },
};

const entities: Readonly<Record<string, string>> = {
  "&amp;": "&",
  "&lt;": "<",
  "&gt;": ">",
  "&quot;": '"',
  "&#x27;": "'",
};

function unescape(html: string): string {
  return html.replace(/&(?:amp|lt|gt|quot|#x27);/g, (e) => entities[e] ?? e);
}

function parseStyle(style: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const decl of (style ?? "").split(";")) {
    const colon = decl.indexOf(":");
    if (colon < 0) continue;
    const rule = allowedStyles[decl.slice(0, colon).trim()];
    const value = decl.slice(colon + 1).trim();
    if (rule && rule.value.test(value)) out[rule.prop] = value;
  }
  return out;
}

// ansi_up's whole output grammar with escape_html on: escaped text (no "<"), a
// <span style? class?> of escaped text, or an <a href> of escaped text.
const piece =
  /<span(?: style="([^"<>]*)")?(?: class="([^"<>]*)")?>([^<]*)<\/span>|<a href="([^"<>]*)">([^<]*)<\/a>|([^<]+)/g;

function segmentsOf(html: string): AnsiSegment[] {
  const out: AnsiSegment[] = [];
  for (const m of html.matchAll(piece)) {
    if (m[6] !== undefined) out.push({ text: unescape(m[6]), classes: [], style: {} });
    else if (m[4] !== undefined) {
      const href = unescape(m[4]);
      const text = unescape(m[5] ?? "");
      out.push(
        /^https?:\/\//i.test(href)
          ? { text, classes: [], style: {}, href }
          : { text, classes: [], style: {} },
      );
    } else {
      const classes = (m[2] ?? "").split(" ").filter((c) => /^ansi-[a-z0-9-]+$/.test(c));
      out.push({ text: unescape(m[3] ?? ""), classes, style: parseStyle(m[1]) });
    }
  }
  return out.filter((s) => s.text !== "");
}

/**
 * A reader of one stream's text: feed it chunks in order (colours and an escape sequence
 * split across chunks carry over) and get the segments of each.
 */
export function createAnsiReader(): { readonly segments: (text: string) => AnsiSegment[] } {
  const ansi = new AnsiUp();
  ansi.use_classes = true;
  ansi.escape_html = true;
  ansi.url_allowlist = { http: 1, https: 1 };
  return { segments: (text) => segmentsOf(ansi.ansi_to_html(text)) };
}
