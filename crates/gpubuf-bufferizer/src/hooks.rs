//! Lifecycle hooks, as in dolphin: closures that receive the bufferizer.

use crate::Bufferizer;
use gpubuf_core::{Element, Kernels};

/// A hook: called with the bufferizer after the event it is registered for.
pub type Hook<B, T> = Box<dyn FnMut(&Bufferizer<B, T>) + Send>;

/// The hooks of one bufferizer.
pub(crate) struct Hooks<B: Kernels, T: Element> {
    pub(crate) on_flush: Option<Hook<B, T>>,
    pub(crate) on_allocate: Option<Hook<B, T>>,
    pub(crate) on_append_one: Option<Hook<B, T>>,
    pub(crate) on_append_multiple: Option<Hook<B, T>>,
    pub(crate) on_full: Option<Hook<B, T>>,
}

impl<B: Kernels, T: Element> Default for Hooks<B, T> {
    fn default() -> Self {
        Hooks {
            on_flush: None,
            on_allocate: None,
            on_append_one: None,
            on_append_multiple: None,
            on_full: None,
        }
    }
}

macro_rules! setter {
    ($name:ident, $field:ident, $doc:literal) => {
        #[doc = $doc]
        pub fn $name(&mut self, hook: impl FnMut(&Bufferizer<B, T>) + Send + 'static) {
            self.hooks.$field = Some(Box::new(hook));
        }
    };
}

impl<B: Kernels, T: Element> Bufferizer<B, T> {
    setter!(set_on_flush, on_flush, "Sets the hook fired after every flush (and after `allocate`).");
    setter!(set_on_allocate, on_allocate, "Sets the hook fired when `allocate` re-allocates.");
    setter!(set_on_append_one, on_append_one, "Sets the hook fired after each single-element append.");
    setter!(
        set_on_append_multiple,
        on_append_multiple,
        "Sets the hook fired after each batch or list append."
    );
    setter!(
        set_on_full,
        on_full,
        "Sets the hook fired when an append fills the bufferizer (after the append hook)."
    );

    /// Removes every hook.
    pub fn clear_hooks(&mut self) {
        self.hooks = Hooks::default();
    }
}
