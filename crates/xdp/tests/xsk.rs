//! AF_XDP transmit sockets (`xdp::xsk::TxSocket`) through a veth pair:
//! every frame queued leaves once, byte for byte as written, in order,
//! also when the UMEM's slots are reused many times over; every slot comes
//! back through the completion ring; copy mode on veth. The frames are
//! captured by an `AF_PACKET` socket in a second namespace that holds only
//! the receiving end. The same frames through the `null-xdp` DUT
//! (`xdp::null`) arrive unchanged. Root only; uniquely named namespaces,
//! removed when the test ends.

use std::io::Read as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use lab::netns::{veth, Netns};
use socket2::{Domain, Protocol, Socket, Type};
use xdp::xsk::{TxConfig, TxSocket};

/// A local experimental EtherType (IEEE 802): nothing else in the
/// namespace sends it.
const ETHERTYPE: [u8; 2] = [0x88, 0xb5];

/// Frames per batch: the frames of one batch share a length.
const BATCH: u32 = 32;

/// Frame `k`: its batch's length (60 to 1514 bytes), its index and pattern.
fn frame(k: u32) -> Vec<u8> {
    let len = 60 + ((k / BATCH) as usize * 37) % (1514 - 60 + 1);
    let mut f: Vec<u8> = (0..len).map(|i| (i as u32 ^ k.wrapping_mul(2_654_435_761)) as u8).collect();
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x0b]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x0a]);
    f[12..14].copy_from_slice(&ETHERTYPE);
    f[14..18].copy_from_slice(&k.to_be_bytes());
    f
}

/// Captures frames of [`ETHERTYPE`] arriving in namespace `ns` (which
/// holds one receiving port) until `n` arrived or a minute passed; counts
/// them in `count` as they come.
fn capture(ns: &Netns, n: u32, count: Arc<AtomicU64>) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let name = ns.name().to_owned();
    let h = std::thread::spawn(move || {
        Netns::attach(&name).enter_thread().unwrap();
        // ETH_P_ALL, in network order.
        let sock = Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(i32::from(0x0003u16.to_be()))))
            .expect("AF_PACKET socket");
        sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.len() < n as usize && Instant::now() < deadline {
            match (&sock).read(&mut buf) {
                Ok(len) if buf[12..14] == ETHERTYPE => {
                    got.push(buf[..len].to_vec());
                    count.store(got.len() as u64, Ordering::Release);
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(e) => panic!("AF_PACKET receive: {e}"),
            }
        }
        got
    });
    ready_rx.recv().unwrap();
    h
}

/// Namespaces named after `names`, IPv6 off (no stray frames).
fn namespaces<const N: usize>(names: [&str; N]) -> [Netns; N] {
    names.map(|n| {
        let ns = Netns::unique(n).unwrap();
        ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1").unwrap();
        ns
    })
}

/// Sends frames `0..n` from `sock` in batches of [`BATCH`] (one length
/// per batch, as few `queue` calls as the ring allows), each batch only
/// after the one before arrived (`received`): the packet socket's receive
/// buffer holds only a few hundred.
fn send_all(sock: &mut TxSocket, n: u32, received: &AtomicU64) {
    let mut next = 0u32;
    let deadline = Instant::now() + Duration::from_secs(60);
    while next < n {
        let end = (next + BATCH).min(n);
        let len = frame(next).len() as u32;
        while next < end {
            assert!(Instant::now() < deadline, "stuck at frame {next}");
            let base = next;
            let k = sock.queue(end - next, len, |i, slot| slot.copy_from_slice(&frame(base + i))).unwrap();
            next += k;
            sock.kick().unwrap();
            if k == 0 {
                std::thread::yield_now();
            }
        }
        while sock.kick().unwrap() > 0 || received.load(Ordering::Acquire) < u64::from(next) {
            assert!(Instant::now() < deadline, "frames before {next} did not arrive");
            std::thread::yield_now();
        }
    }
}

/// Frames `0..n` arrived, each once, in order, byte for byte.
fn assert_all_arrived(got: &[Vec<u8>], n: u32) {
    assert_eq!(got.len(), n as usize);
    for (k, f) in got.iter().enumerate() {
        assert_eq!(f, &frame(k as u32), "frame {k} arrived as sent, in order");
    }
}

#[test]
fn frames_sent_through_a_veth_pair_arrive_byte_for_byte() {
    lab::need_root!();
    // More frames than slots (4096 of them): each slot goes out several times.
    const N: u32 = 10_000;
    let [tx_ns, rx_ns] = namespaces(["xsk-tx", "xsk-rx"]);
    veth(&tx_ns, "xa", &rx_ns, "xb").unwrap();
    let received = Arc::new(AtomicU64::new(0));
    let receiver = capture(&rx_ns, N, received.clone());

    tx_ns.enter_thread().unwrap();
    let ifindex = xdp::sys::if_index("xa").unwrap();
    let mut sock = TxSocket::open(TxConfig::new(ifindex)).unwrap();
    assert!(!sock.zero_copy(), "veth offers no zero-copy");
    assert!(sock.describe().starts_with("copy mode"), "{}", sock.describe());
    // Bad lengths are refused before anything is queued.
    assert!(sock.queue(1, 0, |_, _| ()).is_err());
    assert!(sock.queue(1, 2049, |_, _| ()).is_err());
    send_all(&mut sock, N, &received);
    assert_eq!(sock.sent(), u64::from(N));
    // Every slot comes back.
    let deadline = Instant::now() + Duration::from_secs(5);
    while sock.in_flight() > 0 && Instant::now() < deadline {
        sock.reclaim();
        std::thread::yield_now();
    }
    assert_eq!(sock.in_flight(), 0);
    assert_eq!((sock.bad_completions(), sock.invalid_descriptors().unwrap()), (0, 0));
    assert_all_arrived(&receiver.join().expect("receiver thread"), N);
    drop(sock);
    drop(tx_ns);
    drop(rx_ns);
}

/// The `null-xdp` DUT (`xdp::null`, bpf/null.bpf.c) between two veth
/// pairs: every frame sent into one port leaves the other unchanged.
#[test]
fn the_null_program_forwards_every_frame_unchanged() {
    lab::need_root!();
    const N: u32 = 2_000;
    let [tx_ns, dut_ns, rx_ns] = namespaces(["xsk-ntx", "xsk-ndut", "xsk-nrx"]);
    veth(&tx_ns, "xa", &dut_ns, "xb").unwrap();
    veth(&dut_ns, "xc", &rx_ns, "xd").unwrap();
    // The far end takes redirected frames only with NAPI on.
    rx_ns.run(|| Ok(xdp::sys::set_gro("xd", true)?)).unwrap();
    let null = dut_ns.run(|| Ok(xdp::null::NullRedirect::attach("xb", "xc")?)).unwrap();
    assert_eq!(null.modes(), [xdp::Mode::Native, xdp::Mode::Native]);
    let received = Arc::new(AtomicU64::new(0));
    let receiver = capture(&rx_ns, N, received.clone());
    tx_ns.enter_thread().unwrap();
    let mut sock = TxSocket::open(TxConfig::new(xdp::sys::if_index("xa").unwrap())).unwrap();
    send_all(&mut sock, N, &received);
    assert_all_arrived(&receiver.join().expect("receiver thread"), N);
    drop(sock);
    drop(null);
    drop(tx_ns);
    drop(dut_ns);
    drop(rx_ns);
}
