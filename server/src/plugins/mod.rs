//! The built-in plugins, one folder each, named as upstream.

pub mod defaultbinder;
pub mod defaultpreemption;
pub mod dynamicresources;
pub mod helper;
pub mod imagelocality;
pub mod interpodaffinity;
pub mod nodeaffinity;
pub mod nodedeclaredfeatures;
pub mod nodename;
pub mod nodeports;
pub mod noderesources;
pub mod nodeunschedulable;
pub mod nodevolumelimits;
pub mod podtopologyspread;
pub mod queuesort;
pub mod schedulinggates;
pub mod tainttoleration;
pub mod volumebinding;
pub mod volumerestrictions;
pub mod volumezone;

use crate::framework::Registry;

/// Every built-in plugin by its upstream name.
pub fn in_tree_registry() -> Registry {
    let mut r = Registry::default();
    r.register(queuesort::NAME, queuesort::factory());
    r.register(schedulinggates::NAME, schedulinggates::factory());
    r.register(nodeunschedulable::NAME, nodeunschedulable::factory());
    r.register(nodename::NAME, nodename::factory());
    r.register(tainttoleration::NAME, tainttoleration::factory());
    r.register(nodeaffinity::NAME, nodeaffinity::factory());
    r.register(nodeports::NAME, nodeports::factory());
    r.register(noderesources::fit::NAME, noderesources::fit::factory());
    r.register(
        noderesources::balanced_allocation::NAME,
        noderesources::balanced_allocation::factory(),
    );
    r.register(imagelocality::NAME, imagelocality::factory());
    r.register(interpodaffinity::NAME, interpodaffinity::factory());
    r.register(volumerestrictions::NAME, volumerestrictions::factory());
    r.register(nodevolumelimits::NAME, nodevolumelimits::factory());
    r.register(volumebinding::NAME, volumebinding::factory());
    r.register(volumezone::NAME, volumezone::factory());
    r.register(podtopologyspread::NAME, podtopologyspread::factory());
    r.register(defaultpreemption::NAME, defaultpreemption::factory());
    r.register(dynamicresources::NAME, dynamicresources::factory());
    r.register(defaultbinder::NAME, defaultbinder::factory());
    r.register(nodedeclaredfeatures::NAME, nodedeclaredfeatures::factory());
    r
}
