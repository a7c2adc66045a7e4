//! Where a handler panicked. A caught panic's payload says only what it said; its location
//! (and backtrace) exist only in the panic hook, which runs on the panicking thread before
//! the unwinding starts. So the runtime installs a hook, once per process, that notes them
//! in a thread-local and then calls the hook that was there before (the default one prints
//! the panic as usual; a program's own hook keeps working). The runtime catches the panic on
//! the same thread, in the same poll, and takes the note.
//!
//! A hook that the program sets later, without calling the previous one, turns the notes
//! off: panics are then reported without their location.

use std::backtrace::{Backtrace, BacktraceStatus};
use std::cell::Cell;
use std::sync::Once;

/// What the hook noted of the last panic on this thread.
#[derive(Debug)]
pub(crate) struct PanicNote {
    /// The payload's text, to tell that the note is of the panic being caught.
    text: String,
    /// `file:line:column`.
    pub location: Option<String>,
    /// Taken when `RUST_BACKTRACE` asks for one.
    pub backtrace: Option<Backtrace>,
}

thread_local! {
    static LAST: Cell<Option<PanicNote>> = const { Cell::new(None) };
}

/// The text of a panic payload (a `&str` or a `String`, as `panic!` makes them).
pub(crate) fn text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".to_owned())
}

/// Installs the hook (once per process; later calls do nothing).
pub(crate) fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let captured = Backtrace::capture();
            let note = PanicNote {
                text: text(info.payload()),
                location: info.location().map(ToString::to_string),
                backtrace: (captured.status() == BacktraceStatus::Captured).then_some(captured),
            };
            // A thread being torn down has no thread-locals left: nothing to note.
            let _ = LAST.try_with(|last| last.set(Some(note)));
            previous(info);
        }));
    });
}

/// The note of the last panic on this thread, if it is of a panic whose payload says
/// `text` (a note left by a panic caught elsewhere is dropped).
pub(crate) fn take(text: &str) -> Option<PanicNote> {
    LAST.try_with(Cell::take)
        .ok()
        .flatten()
        .filter(|note| note.text == text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_notes_where_a_panic_happened() {
        install();
        let line = line!() + 1;
        let caught = std::panic::catch_unwind(|| panic!("noted {}", 7)).unwrap_err();
        let said = text(&*caught);
        assert_eq!(said, "noted 7");
        let note = take(&said).expect("the hook noted the panic");
        let at = note.location.unwrap();
        assert!(at.starts_with(&format!("{}:{line}:", file!())), "{at}");
        assert!(take(&said).is_none(), "a note is taken once");
    }

    #[test]
    fn a_note_of_another_panic_is_not_taken() {
        install();
        let _ = std::panic::catch_unwind(|| panic!("first"));
        assert!(take("second").is_none());
        assert!(take("first").is_none(), "the mismatched note was dropped");
    }
}
