// Hash routes: #/inbox/<account>/<conversation>, #/forum/<course>/posts/<post>.

let render = () => {};

export function setRenderer(fn) {
  render = fn;
}

/** Go to `hash`; render again when already there (a hash that does not change fires nothing). */
export function go(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

/** The current route: ['inbox', '1', 'demo-thread-1'] (decoded). */
export function route() {
  return location.hash
    .replace(/^#\/?/, '')
    .split('/')
    .filter(Boolean)
    .map((part) => {
      try {
        return decodeURIComponent(part);
      } catch {
        return part;
      }
    });
}
