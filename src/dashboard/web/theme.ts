// The light and dark themes: the system's choice (prefers-color-scheme) unless the operator picked
// one with the toggle, kept in localStorage. app.css reads <html data-theme>.
export type Theme = "light" | "dark";
const key = "forelead.theme";

function stored(): Theme | undefined {
  try {
    const v = localStorage.getItem(key);
    return v === "light" || v === "dark" ? v : undefined;
  } catch {
    return undefined;
  }
}

export function currentTheme(): Theme {
  return stored() ?? (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
}

/**
 * The event `applyTheme` dispatches on window, so that canvases (charts) repaint in the new
 * colours.
 */
export const themeChanged = "forelead:theme";

/** A colour of the current theme: the value of a custom property of app.css (e.g. "--fg"). */
export function themeColor(name: string): string {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

export function applyTheme(theme: Theme, remember: boolean): void {
  document.documentElement.dataset.theme = theme;
  window.dispatchEvent(new Event(themeChanged));
  if (remember) {
    try {
      localStorage.setItem(key, theme);
    } catch {
      // storage refused (private mode): the choice lasts for this page only
    }
  }
}
