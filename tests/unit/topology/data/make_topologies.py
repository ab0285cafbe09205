#!/usr/bin/env python3
"""Writes the hwloc XML topologies of the binding tests beside this script.

hwloc's synthetic descriptions (HWLOC_SYNTHETIC) hold CPUs, caches and NUMA nodes but no PCI
devices, so a GPU node is lstopo's XML export of a synthetic machine with GPUs added under the
objects they hang from, as hwloc itself records a real machine's PCI tree. Run it again after
changing a description: python3 make_topologies.py (needs lstopo-no-graphics, Debian's hwloc-nox).
"""
import pathlib
import subprocess
import xml.etree.ElementTree as ET

HERE = pathlib.Path(__file__).resolve().parent

# 2 packages, one NUMA node and two L3 caches each, 8 cores per L3, 2 hardware threads per core,
# numbered as Linux numbers them on such a machine: the first threads of every core are CPUs
# 0-31, their siblings 32-63.
CORES = 32
PU_INDEXES = ",".join(f"{core},{core + CORES}" for core in range(CORES))
GPU_NODE = f"pack:2 [numa] l3:2 core:8 pu:2(indexes={PU_INDEXES})"

NVIDIA_H100 = "0302 [10de:2330] [10de:16c1] a1"
MELLANOX_NIC = "0200 [15b3:1021] [15b3:0023] 00"
# Four GPUs behind each package, at the bus numbers of a common 8-GPU board; a NIC beside the
# first, which must not count as a GPU.
PACKAGE_DEVICES = [
    [("0000:18:00.0", NVIDIA_H100), ("0000:19:00.0", MELLANOX_NIC), ("0000:2a:00.0", NVIDIA_H100),
     ("0000:3a:00.0", NVIDIA_H100), ("0000:5d:00.0", NVIDIA_H100)],
    [("0000:9a:00.0", NVIDIA_H100), ("0000:ab:00.0", NVIDIA_H100), ("0000:ba:00.0", NVIDIA_H100),
     ("0000:db:00.0", NVIDIA_H100)],
]


def synthetic_xml(description):
    out = subprocess.run(["lstopo-no-graphics", "--input", description, "--of", "xml", "-"],
                         check=True, capture_output=True, text=True).stdout
    return ET.ElementTree(ET.fromstring(out))


def add_devices(parent, devices, next_index):
    for busid, pci_type in devices:
        bus = busid.split(":")[1]
        bridge = ET.SubElement(parent, "object", {
            "type": "Bridge", "gp_index": str(next_index), "bridge_type": "0-1", "depth": "0",
            "bridge_pci": f"0000:[{bus}-{bus}]"})
        ET.SubElement(bridge, "object", {
            "type": "PCIDev", "gp_index": str(next_index + 1), "pci_busid": busid,
            "pci_type": pci_type, "pci_link_speed": "0.000000"})
        next_index += 2
    return next_index


def write(tree, name):
    for info in tree.iter("info"):
        if info.get("name") == "ProcessName":
            info.set("value", "make_topologies.py")
    ET.indent(tree)
    with open(HERE / name, "wb") as f:
        f.write(b'<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE topology SYSTEM "hwloc2.dtd">\n')
        tree.write(f, encoding="utf-8", xml_declaration=False)
        f.write(b"\n")


def main():
    tree = synthetic_xml(GPU_NODE)
    packages = [o for o in tree.iter("object") if o.get("type") == "Package"]
    index = 10000
    for package, devices in zip(packages, PACKAGE_DEVICES):
        index = add_devices(package, devices, index)
    write(tree, "gpu_node_2x4.xml")

    # The same machine with two GPUs whose NUMA node the firmware does not give: hwloc hangs
    # them from the machine as a whole.
    tree = synthetic_xml(GPU_NODE)
    add_devices(tree.getroot().find("object"), [("0000:18:00.0", NVIDIA_H100),
                                                ("0000:9a:00.0", NVIDIA_H100)], 10000)
    write(tree, "gpu_node_unknown_locality.xml")

    # Four GPUs on one NUMA node of two cores: too few cores to give each GPU its own.
    tree = synthetic_xml("pack:1 [numa] core:2 pu:1")
    package = next(o for o in tree.iter("object") if o.get("type") == "Package")
    add_devices(package, PACKAGE_DEVICES[0][:1] + PACKAGE_DEVICES[0][2:], 10000)
    write(tree, "gpu_node_few_cores.xml")


if __name__ == "__main__":
    main()
