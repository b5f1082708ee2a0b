//! `lockstep-protocol-gen`: writes the message codecs under `src/protocol/generated/` from Kafka
//! JSON message specs.
//!
//! Sources: the Kafka 4.4 messages the `kafka-protocol` crate (Kafka 4.1 schemas) lacks, read
//! from the kafka-clients 4.4 jar's `common/message/*.json` (`tools/install-test-deps.sh`
//! installs it under `target/test-deps/jars/`), and the project's share-transaction messages
//! (keys 1000–1005) from `schemas/Share*.json`, and KIP-1289's draft TxnShareAcknowledge (key 93)
//! from `schemas/TxnShare*.json`. One Rust file per message, plus `mod.rs`.
//!
//! ```text
//! cargo run --release --bin lockstep-protocol-gen            # rewrite src/protocol/generated
//! cargo run --release --bin lockstep-protocol-gen -- --check # fail if the checked-in files differ
//! ```
//!
//! What the generator understands: validVersions, flexibleVersions, per-field versions,
//! nullableVersions, default, ignorable, the types bool/int8/int16/int32/int64/uuid/string/
//! bytes/records, arrays of those and of structs, struct fields, and commonStructs. It refuses
//! (with an error naming the field) what no generated message uses yet: tagged fields and
//! floats. Unknown tagged fields on input are skipped by the runtime (`protocol::wire`).
//!
//! Representation: strings are `String`, bytes and records `bytes::Bytes`, UUIDs `uuid::Uuid`;
//! a field nullable in some version is an `Option`.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

/// The Kafka messages generated from the jar.
const KAFKA_MESSAGES: &[&str] = &[
    "ShareFetchRequest",
    "ShareFetchResponse",
    "ShareAcknowledgeRequest",
    "ShareAcknowledgeResponse",
    "DescribeShareGroupOffsetsRequest",
    "DescribeShareGroupOffsetsResponse",
    "DeleteGroupsRequest",
    "DeleteGroupsResponse",
];

const JAR: &str = "target/test-deps/jars/kafka-clients-4.4.0.jar";
const OUT_DIR: &str = "src/protocol/generated";
const INSTALL: &str = "tools/install-test-deps.sh";
const COMMAND: &str = "cargo run --release --bin lockstep-protocol-gen";

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = args.iter().any(|a| a == "--check");
    if let Some(bad) = args.iter().find(|a| *a != "--check") {
        eprintln!("usage: lockstep-protocol-gen [--check]  (unknown argument {bad})");
        return ExitCode::from(2);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    match run(&root, check) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockstep-protocol-gen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(root: &Path, check: bool) -> Res<()> {
    let files = generate(root)?;
    let out = root.join(OUT_DIR);
    if check {
        let mut stale = Vec::new();
        for (name, text) in &files {
            let path = out.join(name);
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                stale.push(name.clone());
            }
        }
        let on_disk = std::fs::read_dir(&out)
            .map_err(|e| format!("{}: {e}", out.display()))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !files.contains_key(n));
        stale.extend(on_disk.map(|n| format!("{n} (not generated)")));
        if !stale.is_empty() {
            return Err(format!(
                "{OUT_DIR} differs from the specs in: {}; run `{COMMAND}`",
                stale.join(", ")
            ));
        }
        println!("{OUT_DIR}: {} files match the specs", files.len());
    } else {
        std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        for (name, text) in &files {
            std::fs::write(out.join(name), text).map_err(|e| format!("{name}: {e}"))?;
        }
        println!("wrote {} files to {OUT_DIR}", files.len());
    }
    Ok(())
}

/// Every output file (name → text), generated in memory.
fn generate(root: &Path) -> Res<BTreeMap<String, String>> {
    let jar = root.join(JAR);
    if !jar.is_file() {
        return Err(format!(
            "{} is missing: install it with `{INSTALL}` (the generator reads Kafka 4.4's \
             message specs from it)",
            jar.display()
        ));
    }
    let mut specs = Vec::new();
    for name in KAFKA_MESSAGES {
        let entry = format!("common/message/{name}.json");
        let out = Command::new("unzip")
            .arg("-p")
            .arg(&jar)
            .arg(&entry)
            .output()
            .map_err(|e| format!("running unzip on {}: {e}", jar.display()))?;
        if !out.status.success() || out.stdout.is_empty() {
            return Err(format!("{entry} not found in {}", jar.display()));
        }
        let text = String::from_utf8(out.stdout).map_err(|e| format!("{entry}: {e}"))?;
        specs.push((format!("kafka-clients-4.4.0.jar:{entry}"), text));
    }
    let dir = root.join("schemas");
    let mut own: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| (n.starts_with("Share") || n.starts_with("TxnShare")) && n.ends_with(".json"))
        .collect();
    own.sort();
    for file in own {
        let text = std::fs::read_to_string(dir.join(&file)).map_err(|e| format!("{file}: {e}"))?;
        specs.push((format!("schemas/{file}"), text));
    }

    let mut files = BTreeMap::new();
    let mut modules = Vec::new();
    for (source, text) in &specs {
        let spec = parse_json(text).map_err(|e| format!("{source}: {e}"))?;
        let message = Msg::new(&spec).map_err(|e| format!("{source}: {e}"))?;
        let code = message
            .render(source)
            .map_err(|e| format!("{source}: {e}"))?;
        let module = snake(&message.name);
        files.insert(format!("{module}.rs"), code);
        modules.push((module, message.name.clone(), source.clone()));
    }
    files.insert("mod.rs".to_string(), render_mod(&modules));
    Ok(files)
}

/// Kafka's specs allow `//` comments on lines of their own.
fn parse_json(text: &str) -> Res<Value> {
    let json: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect();
    serde_json::from_str(&json.join("\n")).map_err(|e| e.to_string())
}

fn render_mod(modules: &[(String, String, String)]) -> String {
    let mut s = String::new();
    header(
        &mut s,
        "Generated message codecs",
        "every message spec listed below",
    );
    s.push_str("//!\n//! | module | message | spec |\n//! | --- | --- | --- |\n");
    for (module, name, source) in modules {
        let _ = writeln!(s, "//! | [`{module}`] | `{name}` | `{source}` |");
    }
    s.push('\n');
    for (module, _, _) in modules {
        let _ = writeln!(s, "pub mod {module};");
    }
    s.push('\n');
    for (module, name, _) in modules {
        let _ = writeln!(s, "pub use {module}::{name};");
    }
    s
}

fn header(s: &mut String, title: &str, source: &str) {
    let _ = writeln!(s, "//! {title}, from {source}.");
    let _ = writeln!(s, "//!");
    let _ = writeln!(
        s,
        "//! GENERATED by `{COMMAND}` (tools/protocol-gen.rs); do not edit. \
         tests/protocol_gen.rs fails if this file differs from what the specs generate."
    );
}

// ---------------------------------------------------------------------------------------------
// The spec model

/// An inclusive version range; `hi == i16::MAX` for "N+".
#[derive(Clone, Copy, PartialEq)]
struct Versions {
    lo: i16,
    hi: i16,
}

impl Versions {
    const NONE: Versions = Versions { lo: 1, hi: 0 };

    fn parse(v: Option<&Value>, what: &str) -> Res<Versions> {
        let Some(text) = v.and_then(Value::as_str) else {
            return Ok(Versions::NONE);
        };
        let num = |t: &str| {
            t.parse::<i16>()
                .map_err(|_| format!("{what}: bad version range {text:?}"))
        };
        Ok(if text == "none" {
            Versions::NONE
        } else if let Some(lo) = text.strip_suffix('+') {
            Versions {
                lo: num(lo)?,
                hi: i16::MAX,
            }
        } else if let Some((lo, hi)) = text.split_once('-') {
            Versions {
                lo: num(lo)?,
                hi: num(hi)?,
            }
        } else {
            let n = num(text)?;
            Versions { lo: n, hi: n }
        })
    }

    fn is_empty(self) -> bool {
        self.lo > self.hi
    }

    fn intersect(self, other: Versions) -> Versions {
        Versions {
            lo: self.lo.max(other.lo),
            hi: self.hi.min(other.hi),
        }
    }

    /// A Rust condition "`version` is in self", knowing that `version` is in `valid`.
    fn condition(self, valid: Versions) -> String {
        let v = self.intersect(valid);
        if v.is_empty() {
            return "false".into();
        }
        match (v.lo > valid.lo, v.hi < valid.hi) {
            (false, false) => "true".into(),
            (true, false) => format!("version >= {}", v.lo),
            (false, true) => format!("version <= {}", v.hi),
            (true, true) => format!("({} ..= {}).contains(&version)", v.lo, v.hi),
        }
    }

    fn describe(self) -> String {
        if self.is_empty() {
            "none".into()
        } else if self.hi == i16::MAX {
            format!("{}+", self.lo)
        } else if self.lo == self.hi {
            format!("{}", self.lo)
        } else {
            format!("{}-{}", self.lo, self.hi)
        }
    }
}

#[derive(Clone)]
enum Ty {
    Bool,
    Int(&'static str),
    Uuid,
    Str,
    Bytes,
    Array(Box<Ty>),
    Struct(String),
}

impl Ty {
    fn parse(text: &str, what: &str) -> Res<Ty> {
        Ok(match text {
            "bool" => Ty::Bool,
            "int8" => Ty::Int("i8"),
            "int16" => Ty::Int("i16"),
            "int32" => Ty::Int("i32"),
            "int64" => Ty::Int("i64"),
            "uint16" => Ty::Int("u16"),
            "uuid" => Ty::Uuid,
            "string" => Ty::Str,
            "bytes" | "records" => Ty::Bytes,
            t if t.starts_with("[]") => Ty::Array(Box::new(Ty::parse(&t[2..], what)?)),
            t if t.starts_with(|c: char| c.is_ascii_uppercase()) => Ty::Struct(t.to_string()),
            t => {
                return Err(format!(
                    "{what}: type {t} is not supported by the generator"
                ))
            }
        })
    }

    fn rust(&self) -> String {
        match self {
            Ty::Bool => "bool".into(),
            Ty::Int(t) => (*t).into(),
            Ty::Uuid => "Uuid".into(),
            Ty::Str => "String".into(),
            Ty::Bytes => "Bytes".into(),
            Ty::Array(inner) => format!("Vec<{}>", inner.rust()),
            Ty::Struct(name) => name.clone(),
        }
    }

    /// The `wire` writer call for a value `v` (an expression of type `&T` for strings, bytes,
    /// arrays and structs, `T` for scalars).
    fn write(&self, name: &str, v: &str) -> String {
        match self {
            Ty::Bool => format!("wire::w_bool(o, {v})"),
            Ty::Int(t) if *t == "u16" => format!("wire::w_i16(o, {v} as i16)"),
            Ty::Int(t) => format!("wire::w_{t}(o, {v})"),
            Ty::Uuid => format!("wire::w_uuid(o, {v})"),
            Ty::Str => format!("wire::w_str(o, {name:?}, {v}, flex)?"),
            Ty::Bytes => format!("wire::w_bytes(o, {name:?}, {v}, flex)?"),
            Ty::Array(inner) => format!(
                "wire::w_array(o, {name:?}, {v}, flex, |o, x| {{ {}; Ok(()) }})?",
                inner.write(name, &inner.deref_elem("x"))
            ),
            Ty::Struct(_) => format!("{v}.write(o, version)?"),
        }
    }

    /// An array element `x` (a reference) as the writer expects it.
    fn deref_elem(&self, x: &str) -> String {
        match self {
            Ty::Bool | Ty::Int(_) => format!("*{x}"),
            _ => x.to_string(),
        }
    }

    /// The `wire` reader call that yields an `Option` (null) for nullable-capable types.
    fn read_nullable(&self, name: &str) -> Option<String> {
        match self {
            Ty::Str => Some(format!("wire::r_nullable_str(b, {name:?}, flex)?")),
            Ty::Bytes => Some(format!("wire::r_nullable_bytes(b, {name:?}, flex)?")),
            Ty::Array(inner) => Some(format!(
                "wire::r_nullable_array(b, {name:?}, flex, |b| Ok({}))?",
                inner.read(name)
            )),
            _ => None,
        }
    }

    fn read(&self, name: &str) -> String {
        match self {
            Ty::Bool => format!("wire::r_bool(b, {name:?})?"),
            Ty::Int(t) if *t == "u16" => format!("wire::r_i16(b, {name:?})? as u16"),
            Ty::Int(t) => format!("wire::r_{t}(b, {name:?})?"),
            Ty::Uuid => format!("wire::r_uuid(b, {name:?})?"),
            Ty::Struct(s) => format!("{s}::read(b, version)?"),
            nullable => format!(
                "wire::non_null({}, {name:?})?",
                nullable.read_nullable(name).expect("nullable-capable type")
            ),
        }
    }
}

struct Field {
    name: String,
    rust_name: String,
    ty: Ty,
    versions: Versions,
    nullable: Versions,
    ignorable: bool,
    default: Option<Value>,
    about: String,
}

struct StructDef {
    name: String,
    fields: Vec<Field>,
}

struct Msg {
    name: String,
    kind: String,
    api_key: i64,
    valid: Versions,
    flexible: Versions,
    structs: Vec<StructDef>,
}

impl Msg {
    fn new(spec: &Value) -> Res<Msg> {
        let name = spec["name"].as_str().ok_or("no name")?.to_string();
        let kind = spec["type"].as_str().ok_or("no type")?.to_string();
        let api_key = spec["apiKey"].as_i64().ok_or("no apiKey")?;
        let valid = Versions::parse(spec.get("validVersions"), "validVersions")?;
        let flexible = Versions::parse(spec.get("flexibleVersions"), "flexibleVersions")?;
        if valid.is_empty() {
            return Err("no valid versions".into());
        }
        let mut msg = Msg {
            name: name.clone(),
            kind,
            api_key,
            valid,
            flexible,
            structs: Vec::new(),
        };
        let mut common = BTreeMap::new();
        for s in spec["commonStructs"].as_array().into_iter().flatten() {
            let n = s["name"].as_str().ok_or("commonStructs: no name")?;
            common.insert(n.to_string(), s["fields"].clone());
        }
        let fields = msg.fields(&name, &spec["fields"], &common)?;
        msg.structs.insert(0, StructDef { name, fields });
        Ok(msg)
    }

    /// The fields of struct `owner`, registering nested struct definitions.
    fn fields(
        &mut self,
        owner: &str,
        fields: &Value,
        common: &BTreeMap<String, Value>,
    ) -> Res<Vec<Field>> {
        let mut out = Vec::new();
        for f in fields
            .as_array()
            .ok_or(format!("{owner}: fields is not an array"))?
        {
            let name = f["name"]
                .as_str()
                .ok_or(format!("{owner}: field without name"))?;
            let what = format!("{owner}.{name}");
            if f.get("taggedVersions").is_some() || f.get("tag").is_some() {
                return Err(format!(
                    "{what}: tagged fields are not supported by the generator"
                ));
            }
            let ty = Ty::parse(f["type"].as_str().ok_or(format!("{what}: no type"))?, &what)?;
            let elem = match &ty {
                Ty::Array(inner) => inner.as_ref(),
                t => t,
            };
            if let Ty::Struct(s) = elem {
                let nested = if f.get("fields").is_some() {
                    f["fields"].clone()
                } else {
                    common.get(s).cloned().ok_or(format!(
                        "{what}: struct {s} has no fields and is not common"
                    ))?
                };
                if !self.structs.iter().any(|d| &d.name == s) {
                    let nested_fields = self.fields(s, &nested, common)?;
                    self.structs.push(StructDef {
                        name: s.clone(),
                        fields: nested_fields,
                    });
                }
            }
            let nullable = Versions::parse(f.get("nullableVersions"), &what)?;
            if !nullable.is_empty() && !matches!(ty, Ty::Str | Ty::Bytes | Ty::Array(_)) {
                return Err(format!("{what}: nullable {} is not supported", ty.rust()));
            }
            out.push(Field {
                name: name.to_string(),
                rust_name: snake(name),
                versions: Versions::parse(f.get("versions"), &what)?,
                nullable,
                ignorable: f["ignorable"].as_bool().unwrap_or(false),
                default: f.get("default").cloned(),
                about: f["about"].as_str().unwrap_or("").to_string(),
                ty,
            });
        }
        Ok(out)
    }

    fn render(&self, source: &str) -> Res<String> {
        let mut s = String::new();
        header(
            &mut s,
            &format!("`{}` (API key {})", self.name, self.api_key),
            &format!("`{source}`"),
        );
        s.push_str(
            "\n#![allow(clippy::all, unused_imports, unused_variables)]\n\n\
             use crate::protocol::wire::{self, Out, Wire, WireError};\n\
             use bytes::Bytes;\n\
             use kafka_protocol::protocol::buf::{ByteBuf, ByteBufMut};\n\
             use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Message, VersionRange};\n\
             use uuid::Uuid;\n",
        );
        let _ = writeln!(
            s,
            "\n/// Versions of `{}`: {}.\npub const VERSIONS: VersionRange = VersionRange {{ min: {}, max: {} }};",
            self.name,
            self.valid.describe(),
            self.valid.lo,
            self.valid.hi
        );
        for def in &self.structs {
            self.render_struct(&mut s, def)?;
        }
        self.render_message(&mut s);
        Ok(s)
    }

    fn render_struct(&self, s: &mut String, def: &StructDef) -> Res<()> {
        let flex = self.flexible.condition(self.valid);
        let _ = writeln!(s, "\n/// Valid versions: {}.", self.valid.describe());
        let _ = writeln!(
            s,
            "#[derive(Clone, Debug, PartialEq, Eq)]\npub struct {} {{",
            def.name
        );
        for f in &def.fields {
            for line in f.about.lines() {
                let _ = writeln!(s, "    /// {}", line.trim());
            }
            let mut notes = format!("Versions: {}", f.versions.describe());
            if !f.nullable.is_empty() {
                let _ = write!(notes, "; nullable: {}", f.nullable.describe());
            }
            if f.ignorable {
                notes.push_str("; ignorable");
            }
            let _ = writeln!(s, "    ///\n    /// {notes}.");
            let _ = writeln!(s, "    pub {}: {},", f.rust_name, self.field_type(f));
        }
        s.push_str("}\n");

        // Default: the spec's defaults.
        let _ = writeln!(
            s,
            "\nimpl Default for {} {{\n    fn default() -> Self {{\n        Self {{",
            def.name
        );
        for f in &def.fields {
            let _ = writeln!(s, "            {}: {},", f.rust_name, self.default_expr(f)?);
        }
        s.push_str("        }\n    }\n}\n");

        // Wire.
        let _ = writeln!(s, "\nimpl Wire for {} {{", def.name);
        s.push_str(
            "    fn write<O: Out>(&self, o: &mut O, version: i16) -> Result<(), WireError> {\n",
        );
        let _ = writeln!(s, "        let flex = {flex};");
        for f in &def.fields {
            let present = f.versions.condition(self.valid);
            let value = format!("self.{}", f.rust_name);
            let write = if self.is_optional(f) {
                let nullable = f.nullable.condition(self.valid);
                let (check, call) = match &f.ty {
                    Ty::Str => ("as_deref()", "w_nullable_str"),
                    Ty::Bytes => ("as_ref()", "w_nullable_bytes"),
                    _ => ("as_deref()", "w_nullable_array"),
                };
                let refused = match nullable.as_str() {
                    "false" => format!("{value}.is_none()"),
                    other => format!("{value}.is_none() && !({other})"),
                };
                let checked = if nullable == "true" {
                    String::new()
                } else {
                    format!(
                        "if {refused} {{\n            return Err(WireError::UnexpectedNull {{ what: {:?} }});\n        }}\n        ",
                        f.name
                    )
                };
                let body = match &f.ty {
                    Ty::Array(inner) => format!(
                        "wire::{call}(o, {:?}, {value}.{check}, flex, |o, x| {{ {}; Ok(()) }})?",
                        f.name,
                        inner.write(&f.name, &inner.deref_elem("x"))
                    ),
                    _ => format!("wire::{call}(o, {:?}, {value}.{check}, flex)?", f.name),
                };
                format!("{checked}{body};")
            } else {
                let arg = match f.ty {
                    Ty::Bool | Ty::Int(_) | Ty::Struct(_) => value.clone(),
                    _ => format!("&{value}"),
                };
                format!("{};", f.ty.write(&f.name, &arg))
            };
            let absent = if f.ignorable {
                String::new()
            } else {
                format!(
                    " else {{\n            wire::absent({value} == {}, {:?}, version)?;\n        }}",
                    self.default_expr(f)?,
                    f.name
                )
            };
            if present == "true" {
                let _ = writeln!(s, "        {write}");
            } else if present == "false" {
                // Only in versions this message no longer has.
                if !absent.is_empty() {
                    let _ = writeln!(
                        s,
                        "        wire::absent({value} == {}, {:?}, version)?;",
                        self.default_expr(f)?,
                        f.name
                    );
                }
            } else {
                let _ = writeln!(
                    s,
                    "        if {present} {{\n            {write}\n        }}{absent}"
                );
            }
        }
        s.push_str("        if flex {\n            wire::w_no_tags(o);\n        }\n        Ok(())\n    }\n\n");

        s.push_str(
            "    fn read<B: ByteBuf>(b: &mut B, version: i16) -> Result<Self, WireError> {\n",
        );
        let _ = writeln!(s, "        let flex = {flex};");
        for f in &def.fields {
            let present = f.versions.condition(self.valid);
            let read = if self.is_optional(f) {
                let nullable = f.nullable.condition(self.valid);
                let v = f.ty.read_nullable(&f.name).expect("optional type");
                let refused = match nullable.as_str() {
                    "false" => "v.is_none()".to_string(),
                    other => format!("v.is_none() && !({other})"),
                };
                if nullable == "true" {
                    v
                } else {
                    format!(
                        "{{\n            let v = {v};\n            if {refused} {{\n                return Err(WireError::UnexpectedNull {{ what: {:?} }});\n            }}\n            v\n        }}",
                        f.name
                    )
                }
            } else {
                f.ty.read(&f.name)
            };
            if present == "true" {
                let _ = writeln!(s, "        let {} = {read};", f.rust_name);
            } else if present == "false" {
                let _ = writeln!(
                    s,
                    "        let {} = {};",
                    f.rust_name,
                    self.default_expr(f)?
                );
            } else {
                let _ = writeln!(
                    s,
                    "        let {} = if {present} {{ {read} }} else {{ {} }};",
                    f.rust_name,
                    self.default_expr(f)?
                );
            }
        }
        s.push_str("        if flex {\n            wire::r_skip_tags(b)?;\n        }\n");
        let names: Vec<&str> = def.fields.iter().map(|f| f.rust_name.as_str()).collect();
        let _ = writeln!(s, "        Ok(Self {{ {} }})\n    }}\n}}", names.join(", "));
        Ok(())
    }

    fn is_optional(&self, f: &Field) -> bool {
        !f.nullable.is_empty()
    }

    fn field_type(&self, f: &Field) -> String {
        if self.is_optional(f) {
            format!("Option<{}>", f.ty.rust())
        } else {
            f.ty.rust()
        }
    }

    fn default_expr(&self, f: &Field) -> Res<String> {
        let what = format!("{}: default {:?}", f.name, f.default);
        let text = match &f.default {
            None => None,
            Some(Value::String(t)) => Some(t.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(Value::Bool(b)) => Some(b.to_string()),
            Some(_) => return Err(what),
        };
        if self.is_optional(f) && text.as_deref() == Some("null") {
            return Ok("None".into());
        }
        let inner = match (&f.ty, text.as_deref()) {
            (Ty::Bool, None) => "false".into(),
            (Ty::Bool, Some(t @ ("true" | "false"))) => t.into(),
            (Ty::Int(t), None) => format!("0{t}"),
            (Ty::Int(t), Some(v)) => {
                let n = if let Some(hex) = v.strip_prefix("0x") {
                    i64::from_str_radix(hex, 16).map_err(|_| what.clone())?
                } else {
                    v.parse::<i64>().map_err(|_| what.clone())?
                };
                format!("{n}{t}")
            }
            (Ty::Uuid, None) => "Uuid::nil()".into(),
            (Ty::Str, None) => "String::new()".into(),
            (Ty::Str, Some(v)) => format!("String::from({v:?})"),
            (Ty::Bytes, None) => "Bytes::new()".into(),
            (Ty::Array(_), None) => "Vec::new()".into(),
            (Ty::Struct(s), None) => format!("{s}::default()"),
            _ => return Err(what),
        };
        Ok(if self.is_optional(f) {
            format!("Some({inner})")
        } else {
            inner
        })
    }

    fn render_message(&self, s: &mut String) {
        let n = &self.name;
        let flex_lo = self.flexible.lo;
        let flexible = self.flexible.condition(self.valid);
        let (flex_header, classic_header) = if self.kind == "request" {
            (2, 1)
        } else {
            (1, 0)
        };
        let _ = write!(
            s,
            r#"
fn check_version(version: i16) -> Result<(), WireError> {{
    if VERSIONS.min <= version && version <= VERSIONS.max {{
        Ok(())
    }} else {{
        Err(WireError::UnsupportedVersion {{ message: {n:?}, version }})
    }}
}}

impl Message for {n} {{
    const VERSIONS: VersionRange = VERSIONS;
    const DEPRECATED_VERSIONS: Option<VersionRange> = None;
}}

impl Encodable for {n} {{
    fn encode<B: ByteBufMut>(&self, buf: &mut B, version: i16) -> anyhow::Result<()> {{
        check_version(version)?;
        self.write(&mut wire::Sink(buf), version)?;
        Ok(())
    }}

    fn compute_size(&self, version: i16) -> anyhow::Result<usize> {{
        check_version(version)?;
        let mut counter = wire::Counter(0);
        self.write(&mut counter, version)?;
        Ok(counter.0)
    }}
}}

impl Decodable for {n} {{
    fn decode<B: ByteBuf>(buf: &mut B, version: i16) -> anyhow::Result<Self> {{
        check_version(version)?;
        Ok(<Self as Wire>::read(buf, version)?)
    }}
}}

impl HeaderVersion for {n} {{
    /// Flexible versions ({flex_lo}+) use header v{flex_header}, the others v{classic_header}.
    fn header_version(version: i16) -> i16 {{
        if {flexible} {{ {flex_header} }} else {{ {classic_header} }}
    }}
}}
"#
        );
        if self.kind == "request" {
            let response = n.replace("Request", "Response");
            let _ = write!(
                s,
                r#"
impl kafka_protocol::protocol::Request for {n} {{
    const KEY: i16 = {key};
    type Response = super::{module}::{response};
}}
"#,
                key = self.api_key,
                module = snake(&response)
            );
        }
    }
}

/// `ShareFetchRequest` → `share_fetch_request`, `TopicId` → `topic_id`.
fn snake(name: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower = i > 0 && !chars[i - 1].is_ascii_uppercase();
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if i > 0 && (prev_lower || next_lower) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
