//! The authorizer: Kafka's ACL model (StandardAuthorizer semantics), pure and synchronous.
//!
//! An ACL ([`AclBinding`]) grants or denies one principal (`User:NAME`, or `User:*` for every
//! principal) connecting from one host (an IP address, or `*`) one operation on the resources
//! its pattern names: a LITERAL pattern names one resource (or, with the name `*`, every resource
//! of its type), a PREFIXED pattern every resource whose name starts with it.
//!
//! A decision ([`Authorizer::authorize`]), as Kafka's StandardAuthorizer makes it:
//! 1. a super user (`super.users`) is allowed everything;
//! 2. of the ACLs whose pattern matches the resource, any DENY that matches the principal, the
//!    host and the operation (or ALL) denies;
//! 3. else any matching ALLOW allows; an ALLOW of READ, WRITE, DELETE or ALTER also allows
//!    DESCRIBE, and an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS (implications hold for
//!    ALLOW only: a DENY of READ does not deny DESCRIBE);
//! 4. else, if no ACL at all matches the resource (whatever its principal, host or operation),
//!    `allow.everyone.if.no.acl.found` decides (default false); otherwise denied.
//!
//! The ACLs live in an [`AclSet`], ordered by (resource type, pattern type, name, ...), so a
//! decision looks up the literal name, the literal `*` and each prefix of the name: no scan of
//! unrelated ACLs. The set is kept in the topic registry (durable on shard 0, a snapshot on
//! every shard; `shard::registry`). No authorizer configured means every request is allowed.
//!
//! Authorized operations (KIP-430: Metadata, DescribeCluster, DescribeGroups,
//! ConsumerGroupDescribe, ShareGroupDescribe) are a bit field of operation codes
//! ([`operations_field`]): of the operations the resource type supports
//! ([`ResourceType::described_operations`], Kafka's `AclEntry.supportedOperations` without ALL),
//! those [`Authorizer::authorized_operations`] allows, or all of them without an authorizer
//! ([`ResourceType::all_operations`]); [`OPERATIONS_NOT_REQUESTED`] when not asked for.
//!
//! [`AclFilter`] is the filter of DescribeAcls and DeleteAcls: ANY matches every value of a
//! field; the pattern type MATCH matches the ACLs that would apply to the named resource (its
//! literal, the literal `*` and prefixes of it).

#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};
use std::fmt;

/// Kafka's `authorizer.class.name` values the broker accepts.
pub const AUTHORIZER_CLASS_NAMES: &[&str] = &[
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
];
/// The principal that matches every principal in an ACL.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The host (and the literal resource name) that matches every host (resource).
pub const WILDCARD: &str = "*";
/// An `AuthorizedOperations` field that was not asked for (or whose resource is not described):
/// the schema's default, INT32_MIN.
pub const OPERATIONS_NOT_REQUESTED: i32 = i32::MIN;

/// Kafka's `Utils.to32BitField`: bit `code` set for each operation.
pub fn operations_field(ops: impl IntoIterator<Item = Operation>) -> i32 {
    ops.into_iter().fold(0i32, |field, op| {
        let code = op.code();
        assert!(
            (0..31).contains(&code),
            "operation code {code} fits a bit field"
        );
        field | (1 << code)
    })
}

/// Kafka's `ResourceType` (wire code in [`ResourceType::code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
}

impl ResourceType {
    pub const ALL: [ResourceType; 4] = [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
        ResourceType::TransactionalId,
    ];

    pub fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
        }
    }

    pub fn from_code(code: i8) -> Option<ResourceType> {
        ResourceType::ALL.into_iter().find(|t| t.code() == code)
    }

    /// The operations a describe reports for a resource of this type: those it supports, ALL
    /// excepted (Kafka's `AclEntry.supportedOperations`).
    pub fn described_operations(self) -> impl Iterator<Item = Operation> {
        Operation::ALL_OPS
            .into_iter()
            .filter(move |op| *op != Operation::All && self.supports(*op))
    }

    /// The authorized operations of a resource of this type when no authorizer is configured:
    /// every operation it supports.
    pub fn all_operations(self) -> i32 {
        operations_field(self.described_operations())
    }

    /// The operations an ACL on this resource type may name (Kafka's `AclEntry.supportedOperations`).
    pub fn supports(self, op: Operation) -> bool {
        use Operation::*;
        match self {
            ResourceType::Topic => matches!(
                op,
                All | Read
                    | Write
                    | Create
                    | Delete
                    | Alter
                    | Describe
                    | DescribeConfigs
                    | AlterConfigs
            ),
            ResourceType::Group => matches!(
                op,
                All | Read | Delete | Describe | DescribeConfigs | AlterConfigs
            ),
            ResourceType::Cluster => matches!(
                op,
                All | Create
                    | ClusterAction
                    | DescribeConfigs
                    | AlterConfigs
                    | IdempotentWrite
                    | Alter
                    | Describe
            ),
            ResourceType::TransactionalId => {
                matches!(op, All | Describe | Write | TwoPhaseCommit)
            }
        }
    }
}

/// Kafka's `PatternType` of a stored ACL (MATCH and ANY exist only in filters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PatternType {
    Literal,
    Prefixed,
}

impl PatternType {
    pub fn code(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    pub fn from_code(code: i8) -> Option<PatternType> {
        match code {
            3 => Some(PatternType::Literal),
            4 => Some(PatternType::Prefixed),
            _ => None,
        }
    }
}

/// Kafka's `AclOperation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    TwoPhaseCommit,
}

impl Operation {
    pub const ALL_OPS: [Operation; 12] = [
        Operation::All,
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
        Operation::ClusterAction,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::IdempotentWrite,
        Operation::TwoPhaseCommit,
    ];

    pub fn code(self) -> i8 {
        match self {
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
            Operation::TwoPhaseCommit => 15,
        }
    }

    pub fn from_code(code: i8) -> Option<Operation> {
        Operation::ALL_OPS.into_iter().find(|o| o.code() == code)
    }

    /// Whether an ALLOW ACL of `self` allows `requested` (same operation, ALL, or one of the
    /// two implications).
    pub fn allow_covers(self, requested: Operation) -> bool {
        self == requested
            || self == Operation::All
            || (requested == Operation::Describe
                && matches!(
                    self,
                    Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
                ))
            || (requested == Operation::DescribeConfigs && self == Operation::AlterConfigs)
    }

    /// Whether a DENY ACL of `self` denies `requested` (same operation or ALL; no implications).
    pub fn deny_covers(self, requested: Operation) -> bool {
        self == requested || self == Operation::All
    }
}

/// Kafka's `AclPermissionType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Permission {
    Deny,
    Allow,
}

impl Permission {
    pub fn code(self) -> i8 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }

    pub fn from_code(code: i8) -> Option<Permission> {
        match code {
            2 => Some(Permission::Deny),
            3 => Some(Permission::Allow),
            _ => None,
        }
    }
}

/// One ACL. Field order is the set's order: (resource type, pattern type, name) first, so
/// the ACLs of one pattern are adjacent.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct AclBinding {
    pub resource_type: ResourceType,
    pub pattern_type: PatternType,
    pub resource_name: String,
    pub principal: String,
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

/// Why an ACL or a filter is refused (CreateAcls / DeleteAcls answer INVALID_REQUEST, chosen at
/// the edge).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AclError {
    /// A resource type, pattern type, operation or permission code outside the model.
    Unknown { field: &'static str, code: i8 },
    /// A field value Kafka refuses, with its reason.
    Invalid(String),
}

impl fmt::Display for AclError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AclError::Unknown { field, code } => write!(f, "unsupported {field} {code}"),
            AclError::Invalid(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for AclError {}

/// Kafka's principal string `TYPE:NAME`; a missing colon is refused as Kafka does.
fn check_principal(principal: &str) -> Result<(), AclError> {
    match principal.split_once(':') {
        Some((kind, _)) if !kind.is_empty() => Ok(()),
        _ => Err(AclError::Invalid(format!(
            "Could not parse principal from `{principal}` (no colon is present separating the principal type from the principal name)"
        ))),
    }
}

impl AclBinding {
    /// Builds an ACL from CreateAcls' wire codes, refusing what Kafka refuses.
    pub fn from_wire(
        resource_type: i8,
        resource_name: &str,
        pattern_type: i8,
        principal: &str,
        host: &str,
        operation: i8,
        permission: i8,
    ) -> Result<AclBinding, AclError> {
        let resource_type = ResourceType::from_code(resource_type).ok_or(AclError::Unknown {
            field: "resource type",
            code: resource_type,
        })?;
        let pattern_type = PatternType::from_code(pattern_type).ok_or(AclError::Unknown {
            field: "pattern type",
            code: pattern_type,
        })?;
        let operation = Operation::from_code(operation).ok_or(AclError::Unknown {
            field: "operation",
            code: operation,
        })?;
        let permission = Permission::from_code(permission).ok_or(AclError::Unknown {
            field: "permission type",
            code: permission,
        })?;
        if resource_name.is_empty() {
            return Err(AclError::Invalid(
                "Resource name should not be empty".into(),
            ));
        }
        if resource_type == ResourceType::Cluster && resource_name != "kafka-cluster" {
            return Err(AclError::Invalid(
                "The only valid name for the CLUSTER resource is kafka-cluster".into(),
            ));
        }
        check_principal(principal)?;
        if !resource_type.supports(operation) {
            return Err(AclError::Invalid(format!(
                "ResourceType {resource_type:?} only supports operations {}",
                Operation::ALL_OPS
                    .iter()
                    .filter(|o| resource_type.supports(**o))
                    .map(|o| format!("{o:?}").to_uppercase())
                    .collect::<Vec<_>>()
                    .join(",")
            )));
        }
        Ok(AclBinding {
            resource_type,
            pattern_type,
            resource_name: resource_name.to_string(),
            principal: principal.to_string(),
            host: host.to_string(),
            operation,
            permission,
        })
    }

    /// Whether this ACL's pattern names `resource_name` (of its resource type).
    pub fn pattern_matches(&self, resource_name: &str) -> bool {
        match self.pattern_type {
            PatternType::Literal => {
                self.resource_name == resource_name || self.resource_name == WILDCARD
            }
            PatternType::Prefixed => resource_name.starts_with(&self.resource_name),
        }
    }

    /// Whether this ACL applies to `principal` connecting from `host` (operation not checked).
    pub fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == WILDCARD_PRINCIPAL)
            && (self.host == WILDCARD || self.host == host)
    }
}

/// A filter field: ANY (`None`) or one value.
pub type Any<T> = Option<T>;

/// The pattern part of a filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatternFilter {
    Any,
    /// The ACLs that apply to the filter's resource name (literal, wildcard, prefixes).
    Match,
    Exactly(PatternType),
}

/// DescribeAcls' and DeleteAcls' filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: Any<ResourceType>,
    pub resource_name: Any<String>,
    pub pattern: PatternFilter,
    pub principal: Any<String>,
    pub host: Any<String>,
    pub operation: Any<Operation>,
    pub permission: Any<Permission>,
}

impl AclFilter {
    /// Builds a filter from the wire (code 1 is ANY; null strings are ANY).
    pub fn from_wire(
        resource_type: i8,
        resource_name: Option<&str>,
        pattern_type: i8,
        principal: Option<&str>,
        host: Option<&str>,
        operation: i8,
        permission: i8,
    ) -> Result<AclFilter, AclError> {
        const ANY: i8 = 1;
        const MATCH: i8 = 2;
        let resource_type = match resource_type {
            ANY => None,
            code => Some(ResourceType::from_code(code).ok_or(AclError::Unknown {
                field: "resource type",
                code,
            })?),
        };
        let pattern = match pattern_type {
            ANY => PatternFilter::Any,
            MATCH => PatternFilter::Match,
            code => {
                PatternFilter::Exactly(PatternType::from_code(code).ok_or(AclError::Unknown {
                    field: "pattern type",
                    code,
                })?)
            }
        };
        let operation = match operation {
            ANY => None,
            code => Some(Operation::from_code(code).ok_or(AclError::Unknown {
                field: "operation",
                code,
            })?),
        };
        let permission = match permission {
            ANY => None,
            code => Some(Permission::from_code(code).ok_or(AclError::Unknown {
                field: "permission type",
                code,
            })?),
        };
        if let Some(p) = principal {
            check_principal(p)?;
        }
        Ok(AclFilter {
            resource_type,
            resource_name: resource_name.map(str::to_string),
            pattern,
            principal: principal.map(str::to_string),
            host: host.map(str::to_string),
            operation,
            permission,
        })
    }

    /// Whether `acl` passes the filter (Kafka's `AclBindingFilter.matches`).
    pub fn matches(&self, acl: &AclBinding) -> bool {
        let name_ok = match (&self.pattern, &self.resource_name) {
            (PatternFilter::Match, Some(name)) => match acl.pattern_type {
                PatternType::Literal => &acl.resource_name == name || acl.resource_name == WILDCARD,
                PatternType::Prefixed => name.starts_with(&acl.resource_name),
            },
            (PatternFilter::Match, None) | (PatternFilter::Any, None) => true,
            (PatternFilter::Any, Some(name)) => &acl.resource_name == name,
            (PatternFilter::Exactly(p), name) => {
                acl.pattern_type == *p && name.as_ref().is_none_or(|n| &acl.resource_name == n)
            }
        };
        name_ok
            && self.resource_type.is_none_or(|t| t == acl.resource_type)
            && self.principal.as_ref().is_none_or(|p| p == &acl.principal)
            && self.host.as_ref().is_none_or(|h| h == &acl.host)
            && self.operation.is_none_or(|o| o == acl.operation)
            && self.permission.is_none_or(|p| p == acl.permission)
    }
}

/// Every ACL, ordered for lookups by resource (see the module docs). Serialised as a list.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AclSet {
    acls: BTreeSet<AclBinding>,
}

impl AclSet {
    pub fn len(&self) -> usize {
        self.acls.len()
    }

    pub fn is_empty(&self) -> bool {
        self.acls.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &AclBinding> {
        self.acls.iter()
    }

    /// Adds `acl`; false if it was already there (CreateAcls of an existing ACL succeeds).
    pub fn insert(&mut self, acl: AclBinding) -> bool {
        self.acls.insert(acl)
    }

    /// Removes every ACL matching `filter`; returns them.
    pub fn remove_matching(&mut self, filter: &AclFilter) -> Vec<AclBinding> {
        let removed: Vec<AclBinding> = self
            .acls
            .iter()
            .filter(|a| filter.matches(a))
            .cloned()
            .collect();
        for acl in &removed {
            let was_there = self.acls.remove(acl);
            assert!(was_there, "a matching ACL is in the set");
        }
        removed
    }

    /// The ACLs whose pattern is exactly (`resource_type`, `pattern_type`, `name`).
    fn of_pattern<'a>(
        &'a self,
        resource_type: ResourceType,
        pattern_type: PatternType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AclBinding> + 'a {
        let start = AclBinding {
            resource_type,
            pattern_type,
            resource_name: name.to_string(),
            principal: String::new(),
            host: String::new(),
            operation: Operation::All,
            permission: Permission::Deny,
        };
        self.acls.range(start..).take_while(move |a| {
            a.resource_type == resource_type
                && a.pattern_type == pattern_type
                && a.resource_name == name
        })
    }

    /// Every ACL whose pattern matches `name` of `resource_type`: its literal, the literal
    /// wildcard, and its prefixes (each looked up, not scanned).
    pub fn matching<'a>(
        &'a self,
        resource_type: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = &'a AclBinding> + 'a {
        let literal = self.of_pattern(resource_type, PatternType::Literal, name);
        let wildcard = (name != WILDCARD)
            .then(|| self.of_pattern(resource_type, PatternType::Literal, WILDCARD))
            .into_iter()
            .flatten();
        let prefixes = (1..=name.len())
            .filter(move |&end| name.is_char_boundary(end))
            .flat_map(move |end| {
                self.of_pattern(resource_type, PatternType::Prefixed, &name[..end])
            });
        literal.chain(wildcard).chain(prefixes)
    }
}

/// The authorizer's static settings (`authorizer.class.name`, `super.users`,
/// `allow.everyone.if.no.acl.found`), fixed for the life of the process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Principals (`User:NAME`) allowed everything.
    pub super_users: HashSet<String>,
    /// The decision for a resource no ACL names.
    pub allow_if_no_acl: bool,
}

impl AuthorizerConfig {
    /// Parses `super.users` (`User:a;User:b`, Kafka's separator is `;`).
    pub fn parse_super_users(text: &str) -> Result<HashSet<String>, AclError> {
        let mut users = HashSet::new();
        for user in text.split(';').map(str::trim).filter(|u| !u.is_empty()) {
            check_principal(user)?;
            users.insert(user.to_string());
        }
        Ok(users)
    }
}

/// A decision's inputs besides the ACLs: who asks and from where.
#[derive(Clone, Copy, Debug)]
pub struct Requester<'a> {
    /// `User:NAME`.
    pub principal: &'a str,
    /// The client's IP address as text.
    pub host: &'a str,
}

/// An authorizer: the static settings and the current ACLs.
#[derive(Clone, Copy, Debug)]
pub struct Authorizer<'a> {
    pub config: &'a AuthorizerConfig,
    pub acls: &'a AclSet,
}

impl Authorizer<'_> {
    /// Kafka's decision for `who` doing `op` on `name` of `resource_type` (module docs).
    pub fn authorize(
        &self,
        who: Requester<'_>,
        op: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if self.config.super_users.contains(who.principal) {
            return true;
        }
        let mut any_acl = false;
        let mut allowed = false;
        for acl in self.acls.matching(resource_type, name) {
            any_acl = true;
            if !acl.applies_to(who.principal, who.host) {
                continue;
            }
            match acl.permission {
                Permission::Deny if acl.operation.deny_covers(op) => return false,
                Permission::Allow if acl.operation.allow_covers(op) => allowed = true,
                _ => {}
            }
        }
        allowed || (!any_acl && self.config.allow_if_no_acl)
    }

    /// Kafka's `AuthHelper.authorizedOperations`: the bit field of the operations `who` may
    /// perform on `name` of `resource_type` (each decided as [`authorize`](Self::authorize),
    /// implications included).
    pub fn authorized_operations(
        &self,
        who: Requester<'_>,
        resource_type: ResourceType,
        name: &str,
    ) -> i32 {
        operations_field(
            resource_type
                .described_operations()
                .filter(|op| self.authorize(who, *op, resource_type, name)),
        )
    }

    /// Kafka's `authorizeByResourceType`: whether `who` may do `op` on SOME resource of the
    /// type (the idempotent producer's check: WRITE on any topic). Allowed when an ALLOW ACL
    /// for the principal, host and operation exists on the type and no DENY for them covers
    /// every name (a literal `*` DENY, or a DENY with the same pattern as each ALLOW).
    pub fn authorize_any(
        &self,
        who: Requester<'_>,
        op: Operation,
        resource_type: ResourceType,
    ) -> bool {
        if self.config.super_users.contains(who.principal) {
            return true;
        }
        let of_type: Vec<&AclBinding> = self
            .acls
            .iter()
            .filter(|a| a.resource_type == resource_type)
            .collect();
        let applies = |a: &&&AclBinding| a.applies_to(who.principal, who.host);
        let denies: Vec<&&AclBinding> = of_type
            .iter()
            .filter(applies)
            .filter(|a| a.permission == Permission::Deny && a.operation.deny_covers(op))
            .collect();
        if denies
            .iter()
            .any(|d| d.pattern_type == PatternType::Literal && d.resource_name == WILDCARD)
        {
            return false;
        }
        let allowed = of_type
            .iter()
            .filter(applies)
            .filter(|a| a.permission == Permission::Allow && a.operation.allow_covers(op))
            .any(|a| {
                !denies.iter().any(|d| {
                    d.pattern_type == a.pattern_type && d.resource_name == a.resource_name
                        || (d.pattern_type == PatternType::Prefixed
                            && a.resource_name.starts_with(&d.resource_name))
                })
            });
        allowed || (of_type.is_empty() && self.config.allow_if_no_acl)
    }
}
