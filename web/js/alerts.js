// Noticing new messages away from the page: a browser notification while the tab is hidden, and
// a short beep — each the person's choice (both off until turned on, kept in localStorage for
// this browser). Turning notifications on asks the browser's permission then, from the click.
import { h } from './dom.js';
import { notify } from './ui.js';

const NOTIFY = 'agora.alerts.notify';
const SOUND = 'agora.alerts.sound';

export const alerts = {
  get notify() {
    return localStorage.getItem(NOTIFY) === '1' && 'Notification' in window && Notification.permission === 'granted';
  },
  get sound() {
    return localStorage.getItem(SOUND) === '1';
  },
};

let audio = null;

/** A short two-tone beep made by WebAudio (no sound file to fetch). */
export function beep() {
  try {
    audio ??= new AudioContext();
    if (audio.state === 'suspended') audio.resume().catch(() => {});
    const now = audio.currentTime;
    const gain = audio.createGain();
    gain.connect(audio.destination);
    gain.gain.setValueAtTime(0.0001, now);
    gain.gain.exponentialRampToValueAtTime(0.15, now + 0.02);
    gain.gain.exponentialRampToValueAtTime(0.0001, now + 0.3);
    const tone = audio.createOscillator();
    tone.type = 'sine';
    tone.frequency.setValueAtTime(880, now);
    tone.frequency.setValueAtTime(1175, now + 0.12);
    tone.connect(gain);
    tone.start(now);
    tone.stop(now + 0.32);
  } catch {
    // no audio output: the notification (if on) still says it
  }
}

/**
 * Tell the person of something new: a notification when the tab is hidden (if on), a beep (if
 * on; `audible`: also when the tab is visible). `onOpen` runs when the notification is clicked.
 */
export function alertOf({ title, body, tag, onOpen, audible = false }) {
  const hidden = document.visibilityState === 'hidden';
  if (hidden && alerts.notify) {
    try {
      const shown = new Notification(title, { body, tag, lang: 'vi' });
      shown.onclick = () => {
        window.focus();
        onOpen?.();
        shown.close();
      };
    } catch {
      // a browser that only notifies from a service worker: the tab's title still counts
    }
  }
  if (alerts.sound && (hidden || audible)) beep();
}

/** The two toggles (notifications, sound), for the inbox's side bar. */
export function alertSettings() {
  const supported = 'Notification' in window;
  const notifyBox = h('input', { type: 'checkbox', id: 'alert-notify', class: 'alert-notify', checked: alerts.notify, disabled: !supported });
  const soundBox = h('input', { type: 'checkbox', id: 'alert-sound', class: 'alert-sound', checked: alerts.sound });
  notifyBox.addEventListener('change', async () => {
    if (!notifyBox.checked) {
      localStorage.setItem(NOTIFY, '0');
      return;
    }
    let permission = Notification.permission;
    if (permission === 'default') permission = await Notification.requestPermission();
    if (permission !== 'granted') {
      notifyBox.checked = false;
      localStorage.setItem(NOTIFY, '0');
      notify('The browser does not allow this page to notify you: allow notifications for this site in its settings, then turn them on here.', 'error');
      return;
    }
    localStorage.setItem(NOTIFY, '1');
  });
  soundBox.addEventListener('change', () => {
    localStorage.setItem(SOUND, soundBox.checked ? '1' : '0');
    if (soundBox.checked) beep(); // what it sounds like, and the click lets audio start
  });
  return h('details', { class: 'alert-settings popover' },
    h('summary', {}, '🔔 Alerts'),
    h('div', { class: 'alert-panel' },
      h('p', { class: 'muted' }, 'New messages in conversations assigned to you or to no one:'),
      h('div', { class: 'check' }, notifyBox, h('label', { for: 'alert-notify' }, 'Notify me while this tab is hidden')),
      h('div', { class: 'check' }, soundBox, h('label', { for: 'alert-sound' }, 'Play a sound')),
      supported ? null : h('p', { class: 'muted' }, 'This browser has no notifications.')));
}
