//! Node declared features (KEP-5328, `NodeDeclaredFeatures`, beta and on in v1.36): the
//! features a kubelet declares in `node.status.declaredFeatures`, and which of them a
//! pod needs, as upstream `k8s.io/component-helpers/nodedeclaredfeatures` infers them
//! for scheduling. A set is a bitmap over the v1.36 registry, in its sorted order.

/// The v1.36 registry, sorted by name (upstream's bit order). None of them has a
/// MaxVersion, so none stops being required for a newer scheduler.
pub const FEATURES: [&str; 5] = [
    "ExtendWebSocketsToKubelet",
    "InPlacePodLevelResourcesVerticalScaling",
    "InPlacePodVerticalScalingInitContainers",
    "RestartAllContainersOnContainerExits",
    "UserNamespacesHostNetworkSupport",
];

const RESTART_ALL_CONTAINERS: u32 = 1 << 3;
const USER_NAMESPACES_HOST_NETWORK: u32 = 1 << 4;

/// A set of declared or required features (bit i: `FEATURES[i]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FeatureSet(pub u32);

impl FeatureSet {
    /// Upstream `TryMap`: the names a node declares; names this registry does not
    /// know (a newer or older kubelet's) are ignored.
    pub fn of_names<'a>(names: impl IntoIterator<Item = &'a str>) -> FeatureSet {
        FeatureSet(names.into_iter().fold(0, |acc, n| {
            acc | FEATURES.iter().position(|f| *f == n).map_or(0, |i| 1 << i)
        }))
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether every feature of `self` is in `other`.
    pub fn is_subset(self, other: FeatureSet) -> bool {
        self.0 & !other.0 == 0
    }

    /// The names in the set, in registry order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        FEATURES
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, n)| *n)
    }
}

/// What a pod's spec requires of its node (upstream `InferForPodScheduling`): only two
/// v1.36 features are inferred at scheduling time; the others matter for updates.
pub fn required_by_pod(spec: &k8s_openapi::api::core::v1::PodSpec) -> FeatureSet {
    let mut set = 0;
    let restart_all = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.restart_policy_rules.iter().flatten())
        .any(|r| r.action == "RestartAllContainers");
    if restart_all {
        set |= RESTART_ALL_CONTAINERS;
    }
    if spec.host_network == Some(true) && spec.host_users == Some(false) {
        set |= USER_NAMESPACES_HOST_NETWORK;
    }
    FeatureSet(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_sorted_and_unknown_names_are_ignored() {
        let mut sorted = FEATURES;
        sorted.sort_unstable();
        assert_eq!(sorted, FEATURES);
        let s = FeatureSet::of_names(["UserNamespacesHostNetworkSupport", "FromTheFuture"]);
        assert_eq!(
            s.names().collect::<Vec<_>>(),
            ["UserNamespacesHostNetworkSupport"]
        );
    }

    #[test]
    fn pods_require_what_upstream_infers() {
        let spec =
            |y: &str| -> k8s_openapi::api::core::v1::PodSpec { crate::yaml::from_str(y).unwrap() };
        assert!(required_by_pod(&spec("containers: [{name: c}]")).is_empty());
        let r = required_by_pod(&spec(
            "containers: [{name: c, restartPolicy: Never, restartPolicyRules: [{action: RestartAllContainers, exitCodes: {operator: In, values: [42]}}]}]",
        ));
        assert_eq!(
            r.names().collect::<Vec<_>>(),
            ["RestartAllContainersOnContainerExits"]
        );
        assert!(required_by_pod(&spec("hostNetwork: true\ncontainers: [{name: c}]")).is_empty());
        let r = required_by_pod(&spec(
            "hostNetwork: true\nhostUsers: false\ncontainers: [{name: c}]",
        ));
        assert!(r.is_subset(FeatureSet::of_names(FEATURES)));
        assert!(!r.is_subset(FeatureSet::default()));
    }
}
