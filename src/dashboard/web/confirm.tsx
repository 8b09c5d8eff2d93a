// <ConfirmButton>: an action that asks first — a modal <dialog> (focus moves into it, Escape
// cancels) saying what will happen, with an optional reason for the audit trail.
import { useRef, useState } from "preact/hooks";

export interface ConfirmButtonProps {
  /** The button's text, e.g. "Pause". */
  readonly label: string;
  /** The accessible name when the label alone is ambiguous in a table, e.g. "Pause runner r1". */
  readonly ariaLabel?: string;
  /** The dialog's question, e.g. "Pause runner r1?". */
  readonly title: string;
  /** What will happen. */
  readonly body: string;
  /** Styled as destructive (retire, cancel). */
  readonly danger?: boolean;
  /** Ask for a reason (kept in the audit trail). */
  readonly withReason?: boolean;
  /** Runs the action; its rejection goes to onError. */
  onConfirm(reason: string): Promise<unknown>;
  onError(error: unknown): void;
  onDone?(): void;
}

export function ConfirmButton(props: ConfirmButtonProps) {
  const dialog = useRef<HTMLDialogElement>(null);
  const [busy, setBusy] = useState(false);
  const [reason, setReason] = useState("");
  const confirm = async (e: Event) => {
    e.preventDefault();
    dialog.current?.close();
    setBusy(true);
    try {
      await props.onConfirm(reason);
      props.onDone?.();
    } catch (err) {
      props.onError(err);
    } finally {
      setBusy(false);
      setReason("");
    }
  };
  return (
    <>
      <button
        type="button"
        class={props.danger ? "danger" : undefined}
        disabled={busy}
        aria-label={props.ariaLabel}
        onClick={() => dialog.current?.showModal()}
        data-action={props.label.toLowerCase()}
      >
        {busy ? `${props.label}…` : props.label}
      </button>
      <dialog ref={dialog} aria-label={props.title}>
        <form method="dialog" onSubmit={confirm}>
          <h2>{props.title}</h2>
          <p>{props.body}</p>
          {props.withReason ? (
            <p>
              <label>
                Reason (for the audit trail){" "}
                <input
                  type="text"
                  value={reason}
                  maxLength={500}
                  onInput={(e) => setReason((e.target as HTMLInputElement).value)}
                />
              </label>
            </p>
          ) : null}
          <div class="actions">
            <button type="submit" class={props.danger ? "danger" : undefined} data-confirm="yes">
              {props.label}
            </button>
            <button type="button" onClick={() => dialog.current?.close()} data-confirm="no">
              Keep as is
            </button>
          </div>
        </form>
      </dialog>
    </>
  );
}
