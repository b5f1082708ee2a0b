//! Validated broker configuration (units in names); defaults from `constants`.
