//! AF_XDP transmit sockets (`xdp::xsk::TxSocket`) through a veth pair:
//! every frame queued leaves once, byte for byte as written, in order,
//! also when the UMEM's slots are reused many times over; every slot comes
//! back through the completion ring; copy mode on veth. The frames are
//! captured by an `AF_PACKET` socket in a second namespace that holds only
//! the receiving end. Root only; uniquely named namespaces, removed when
//! the test ends.

use std::io::Read as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use lab::netns::{am_root, veth, Netns};
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

#[test]
fn frames_sent_through_a_veth_pair_arrive_byte_for_byte() {
    assert!(am_root(), "the AF_XDP tests need root");
    // More frames than slots (4096 of them): each slot goes out several times.
    const N: u32 = 10_000;
    let tx_ns = Netns::unique("xsk-tx").unwrap();
    let rx_ns = Netns::unique("xsk-rx").unwrap();
    veth(&tx_ns, "xa", &rx_ns, "xb").unwrap();
    for ns in [&tx_ns, &rx_ns] {
        ns.sysctl("net.ipv6.conf.all.disable_ipv6", "1").unwrap();
    }
    let received = Arc::new(AtomicU64::new(0));
    let (ready_tx, ready_rx) = mpsc::channel();
    let rx_name = rx_ns.name().to_owned();
    let count = received.clone();
    let receiver = std::thread::spawn(move || {
        Netns::attach(&rx_name).enter_thread().unwrap();
        let sock = Socket::new(Domain::PACKET, Type::RAW, Some(Protocol::from(i32::from(0x0003u16.to_be()))))
            .expect("AF_PACKET socket");
        sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 2048];
        let deadline = Instant::now() + Duration::from_secs(60);
        while got.len() < N as usize && Instant::now() < deadline {
            match (&sock).read(&mut buf) {
                Ok(n) if buf[12..14] == ETHERTYPE => {
                    got.push(buf[..n].to_vec());
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

    tx_ns.enter_thread().unwrap();
    let ifindex = xdp::sys::if_index("xa").unwrap();
    let mut sock = TxSocket::open(TxConfig::new(ifindex)).unwrap();
    assert!(!sock.zero_copy(), "veth offers no zero-copy");
    assert!(sock.describe().starts_with("copy mode"), "{}", sock.describe());
    // Bad lengths are refused before anything is queued.
    assert!(sock.queue(1, 0, |_, _| ()).is_err());
    assert!(sock.queue(1, 2049, |_, _| ()).is_err());
    let mut next = 0u32;
    let deadline = Instant::now() + Duration::from_secs(60);
    while next < N {
        // One batch of up to 32 frames of one length in as few calls as
        // the ring allows, then wait until they arrived: the packet
        // socket's receive buffer holds only a few hundred.
        let end = (next + BATCH).min(N);
        let len = frame(next).len() as u32;
        while next < end {
            assert!(Instant::now() < deadline, "stuck at frame {next}");
            let base = next;
            let n = sock.queue(end - next, len, |i, slot| slot.copy_from_slice(&frame(base + i))).unwrap();
            next += n;
            sock.kick().unwrap();
            if n == 0 {
                std::thread::yield_now();
            }
        }
        while sock.kick().unwrap() > 0 || received.load(Ordering::Acquire) < u64::from(next) {
            assert!(Instant::now() < deadline, "frames before {next} did not arrive");
            std::thread::yield_now();
        }
    }
    assert_eq!(sock.sent(), u64::from(N));
    // Every slot comes back.
    let deadline = Instant::now() + Duration::from_secs(5);
    while sock.in_flight() > 0 && Instant::now() < deadline {
        sock.reclaim();
        std::thread::yield_now();
    }
    assert_eq!(sock.in_flight(), 0);
    assert_eq!((sock.bad_completions(), sock.invalid_descriptors().unwrap()), (0, 0));
    let got = receiver.join().expect("receiver thread");
    assert_eq!(got.len(), N as usize);
    for (k, f) in got.iter().enumerate() {
        assert_eq!(f, &frame(k as u32), "frame {k} arrived as sent, in order");
    }
    drop(sock);
    drop(tx_ns);
    drop(rx_ns);
}
