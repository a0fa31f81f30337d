//! Per-cycle plugin state. Each plugin has its own, kept by the SDK from PreFilter to
//! the end of the attempt and forked (cloned) for what-if evaluations.

use std::any::Any;

trait StateData: Any + Send + Sync {
    fn clone_box(&self) -> Box<dyn StateData>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_box(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// One plugin's state for one scheduling attempt: whatever value the plugin stores
/// (at PreFilter, usually). Cloning it is the fork a dry run starts from.
#[derive(Default)]
pub struct CycleState {
    data: Option<Box<dyn StateData>>,
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        CycleState {
            data: self.data.as_deref().map(|d| d.clone_box()),
        }
    }
}

impl CycleState {
    /// Stores the plugin's value, replacing any earlier one.
    pub fn write<T: Any + Clone + Send + Sync>(&mut self, value: T) {
        self.data = Some(Box::new(value));
    }
    /// The stored value, if one of this type was written.
    pub fn read<T: Any>(&self) -> Option<&T> {
        self.data.as_deref()?.as_any().downcast_ref()
    }
    pub fn read_mut<T: Any>(&mut self) -> Option<&mut T> {
        self.data.as_deref_mut()?.as_any_mut().downcast_mut()
    }
    pub fn is_empty(&self) -> bool {
        self.data.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_is_independent() {
        let mut a = CycleState::default();
        a.write(vec![1, 2]);
        let mut b = a.clone();
        b.read_mut::<Vec<i32>>().unwrap().push(3);
        assert_eq!(a.read::<Vec<i32>>().unwrap(), &vec![1, 2]);
        assert_eq!(b.read::<Vec<i32>>().unwrap(), &vec![1, 2, 3]);
        assert!(a.read::<String>().is_none());
    }
}
