//! One XDP program in a BPF object of its own, with a device map of the
//! interfaces it may send through and a map of each attached interface's
//! MAC address: the loading, attaching, counting and test-run bookkeeping
//! the Teredo and softwire fast paths share (each keeps its own maps and
//! settings beside it).

use crate::loader::{attach_link, chain, map_err, per_cpu_sum, test_run_once};
use crate::types::Count;
use crate::types::IfMac;
use crate::{Attachment, Error, Mode, TestResult};
use aya::maps::{DevMapHash, HashMap, MapData, PerCpuArray};
use aya::programs::{Program, ProgramError, Xdp};
use aya::{Ebpf, EbpfLoader, Pod};

/// Program `name` of `bpf` as a `P` (Xdp, SchedClassifier, ...).
fn program_mut<'a, P>(bpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut P, Error>
where
    &'a mut P: TryFrom<&'a mut Program, Error = ProgramError>,
{
    bpf.program_mut(name)
        .ok_or_else(|| Error::Bpf(format!("program {name} missing from the object")))?
        .try_into()
        .map_err(|e| Error::Bpf(format!("program {name}: {e}")))
}

/// The names of one object's program and shared maps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Names {
    /// What the object is, for errors ("the Teredo BPF object").
    pub object: &'static str,
    /// The XDP program.
    pub program: &'static str,
    /// The device map of the interfaces the program may redirect to.
    pub tx: &'static str,
    /// The map of each attached interface's MAC address.
    pub ifmac: &'static str,
    /// The per-CPU counter array.
    pub counters: &'static str,
}

/// A loaded single-program object and its attachments. Dropping it
/// detaches every attachment.
pub(crate) struct Single {
    bpf: Ebpf,
    names: Names,
    attached: Vec<Attachment>,
}

impl Single {
    /// Loads `object` with `loader` (its map sizes already set) and the
    /// program into the kernel.
    pub fn load(loader: &mut EbpfLoader, object: &[u8], names: Names) -> Result<Single, Error> {
        let mut bpf =
            loader.load(object).map_err(|e| Error::Unavailable(format!("loading {}: {}", names.object, chain(&e))))?;
        let p = names.program;
        let prog: &mut Xdp = program_mut(&mut bpf, p)?;
        prog.load().map_err(|e| Error::Unavailable(format!("loading program {p}: {}", chain(&e))))?;
        Ok(Single { bpf, names, attached: Vec::new() })
    }

    /// The map `name`.
    pub fn map(&self, name: &'static str) -> Result<&aya::maps::Map, Error> {
        self.bpf.map(name).ok_or_else(|| Error::Bpf(format!("map {name} missing from the object")))
    }

    /// The map `name`, to change.
    pub fn map_mut(&mut self, name: &'static str) -> Result<&mut aya::maps::Map, Error> {
        self.bpf.map_mut(name).ok_or_else(|| Error::Bpf(format!("map {name} missing from the object")))
    }

    /// The map `name` as a hash map of `K` to `V`.
    pub fn hash<K: Pod, V: Pod>(&self, name: &'static str) -> Result<HashMap<&MapData, K, V>, Error> {
        HashMap::try_from(self.map(name)?).map_err(|e| Error::Bpf(format!("map {name}: {e}")))
    }

    /// The map `name` as a hash map of `K` to `V`, to change.
    pub fn hash_mut<K: Pod, V: Pod>(&mut self, name: &'static str) -> Result<HashMap<&mut MapData, K, V>, Error> {
        HashMap::try_from(self.map_mut(name)?).map_err(|e| Error::Bpf(format!("map {name}: {e}")))
    }

    /// A further program of the object (the B4's tc program) as a `P`.
    pub fn program<'a, P>(&'a self, name: &'static str) -> Result<&'a P, Error>
    where
        &'a P: TryFrom<&'a Program, Error = ProgramError>,
    {
        self.bpf
            .program(name)
            .ok_or_else(|| Error::Bpf(format!("program {name} missing from the object")))?
            .try_into()
            .map_err(|e| Error::Bpf(format!("program {name}: {e}")))
    }

    /// A further program of the object as a `P`, to load or attach.
    pub fn program_mut<'a, P>(&'a mut self, name: &'static str) -> Result<&'a mut P, Error>
    where
        &'a mut P: TryFrom<&'a mut Program, Error = ProgramError>,
    {
        program_mut(&mut self.bpf, name)
    }

    fn xdp_mut(&mut self) -> Result<&mut Xdp, Error> {
        let p = self.names.program;
        program_mut(&mut self.bpf, p)
    }

    /// Lets the program send through `ifindex`.
    pub fn allow_egress(&mut self, ifindex: u32) -> Result<(), Error> {
        let tx = self.names.tx;
        let mut m: DevMapHash<&mut MapData> =
            DevMapHash::try_from(self.map_mut(tx)?).map_err(|e| Error::Bpf(format!("map {tx}: {e}")))?;
        m.insert(ifindex, ifindex, None, 0).map_err(|e| match e {
            aya::maps::xdp::XdpMapError::MapError(e) => map_err(tx, e),
            e => Error::Bpf(format!("map {tx}: {e}")),
        })
    }

    /// Accepts frames on `ifindex` only when addressed to `mac`.
    pub fn set_interface_mac(&mut self, ifindex: u32, mac: [u8; 6]) -> Result<(), Error> {
        let ifmac = self.names.ifmac;
        let mut m = self.hash_mut::<u32, IfMac>(ifmac)?;
        m.insert(ifindex, IfMac { addr: mac, pad: 0 }, 0).map_err(|e| map_err(ifmac, e))
    }

    /// Attaches to `iface` (of the caller's network namespace), records
    /// its MAC address and allows it as an egress; `Mode::Off` attaches
    /// nothing and returns `None`.
    pub fn attach(&mut self, iface: &str, mode: Mode) -> Result<Option<&Attachment>, Error> {
        if mode == Mode::Off {
            return Ok(None);
        }
        let ifindex =
            crate::sys::if_index(iface).ok_or_else(|| Error::Interface(format!("{iface}: no such interface")))?;
        if self.attached.iter().any(|a| a.ifindex == ifindex) {
            return Err(Error::Interface(format!("{iface}: already attached")));
        }
        let (link, used, fallback) = attach_link(self.xdp_mut()?, iface, ifindex, mode)?;
        let program = self.names.program;
        self.attached.push(Attachment { iface: iface.to_owned(), ifindex, program, mode: used, fallback, link });
        let mac = crate::sys::if_mac(iface).map_err(|e| Error::Interface(format!("{iface}: its MAC address: {e}")));
        if let Err(e) = mac.and_then(|m| self.set_interface_mac(ifindex, m)).and_then(|()| self.allow_egress(ifindex)) {
            let _ = self.detach(iface);
            return Err(e);
        }
        Ok(self.attached.last())
    }

    /// Detaches from `iface`; false when it was not attached.
    pub fn detach(&mut self, iface: &str) -> Result<bool, Error> {
        let Some(i) = self.attached.iter().position(|a| a.iface == iface) else { return Ok(false) };
        let a = self.attached.remove(i);
        self.xdp_mut()?
            .detach(a.link)
            .map_err(|e| Error::Interface(format!("{iface}: detach failed: {}", chain(&e))))?;
        Ok(true)
    }

    /// Detaches from every interface.
    pub fn detach_all(&mut self) -> Result<(), Error> {
        let names: Vec<String> = self.attached.iter().map(|a| a.iface.clone()).collect();
        for n in names {
            self.detach(&n)?;
        }
        Ok(())
    }

    /// The attachments in force.
    pub fn attachments(&self) -> &[Attachment] {
        &self.attached
    }

    /// The counters of `all` (each with its index in the array) summed
    /// over CPUs, in that order.
    pub fn counters<C: Copy>(&self, all: &[C], index: impl Fn(C) -> u32) -> Result<Vec<(C, Count)>, Error> {
        let name = self.names.counters;
        let a: PerCpuArray<&MapData, Count> =
            PerCpuArray::try_from(self.map(name)?).map_err(|e| Error::Bpf(format!("map {name}: {e}")))?;
        let mut out = Vec::with_capacity(all.len());
        for &c in all {
            let v = a.get(&index(c), 0).map_err(|e| map_err(name, e))?;
            out.push((c, per_cpu_sum(&v)));
        }
        Ok(out)
    }

    /// The program over `frame` with `BPF_PROG_TEST_RUN`, as received on
    /// `ingress_ifindex` (not live: nothing is sent).
    pub fn test_run(&self, frame: &[u8], ingress_ifindex: u32, repeat: u32) -> Result<TestResult, Error> {
        let p = self.names.program;
        let prog: &Xdp = self
            .bpf
            .program(p)
            .ok_or_else(|| Error::Bpf(format!("program {p} missing")))?
            .try_into()
            .map_err(|e| Error::Bpf(format!("program {p}: {e}")))?;
        test_run_once(prog, frame, ingress_ifindex, repeat)
    }
}

impl Drop for Single {
    fn drop(&mut self) {
        let _ = self.detach_all();
    }
}
