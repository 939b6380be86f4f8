"""SIF files: whether a file is a complete SIF image, and where its root file system starts."""
import os
import struct


SIF_MAGIC = b'SIF_MAGIC'
SIF_MAGIC_OFFSET = 32
SIF_HEADER_SIZE = 128
# dataoff and datalen (little-endian int64) in the SIF global header: the file must reach dataoff + datalen
SIF_DATA_FIELDS_OFFSET = 112
# dtotal, descoff and desclen: the number of data object descriptors, where they are and how long
SIF_DESCRIPTOR_FIELDS_OFFSET = 88
# In a descriptor: datatype (int32), used (bool), 3 ids (uint32) and the object's offset (int64); at 201 the
# partition's fstype and parttype (int32 each). A root file system is datatype 0x4004, SquashFS (1), of type
# PrimSys (2) or System (1).
SIF_DESCRIPTOR_FORMAT = '<iBIIIq'
SIF_PARTITION_EXTRA_OFFSET = 201
SIF_PARTITION_DATATYPE, SIF_FS_SQUASHFS, SIF_PARTTYPES_SYSTEM = 0x4004, 1, (2, 1)


def sif_problem(path):
    """Return None if path looks like a complete SIF image, else a description of what it is instead."""
    try:
        size = os.path.getsize(path)
        with open(path, 'rb') as handle:
            head = handle.read(SIF_HEADER_SIZE)
    except OSError as err:
        return "it cannot be read (%s)" % err

    if head[SIF_MAGIC_OFFSET:SIF_MAGIC_OFFSET + len(SIF_MAGIC)] == SIF_MAGIC:
        if len(head) < SIF_HEADER_SIZE:
            return "it is truncated: only %d bytes, less than a SIF header" % size
        dataoff, datalen = struct.unpack_from('<qq', head, SIF_DATA_FIELDS_OFFSET)
        if size < dataoff + datalen:
            return ("it is truncated: %d bytes, but its SIF header says the data ends at byte %d "
                    "(an interrupted download or copy?)" % (size, dataoff + datalen))
        return None

    text = head.decode('ascii', errors='replace')
    if text.startswith('version https://git-lfs'):
        return "it is a Git LFS pointer file, not the image (fetch the real file, e.g. with 'git lfs pull')"
    if '<html' in text.lower() or '<!doctype' in text.lower():
        return "it is an HTML page, not an image (an error page saved by a failed download?)"
    if size < SIF_HEADER_SIZE:
        return "it is only %d bytes long, too short for a SIF image (truncated or empty?)" % size
    return "there is no %s at byte %d (found %r), so it is not a SIF image" % (
        SIF_MAGIC.decode(), SIF_MAGIC_OFFSET, head[SIF_MAGIC_OFFSET:SIF_MAGIC_OFFSET + len(SIF_MAGIC)])


def sif_partition_offset(path):
    """Byte offset of the image's root file system (its SquashFS system partition) in a SIF file."""
    with open(path, 'rb') as handle:
        head = handle.read(SIF_HEADER_SIZE)
        if len(head) < SIF_HEADER_SIZE or head[SIF_MAGIC_OFFSET:SIF_MAGIC_OFFSET + len(SIF_MAGIC)] != SIF_MAGIC:
            raise ValueError("%s is not a SIF image" % path)
        total, descoff, desclen = struct.unpack_from('<qqq', head, SIF_DESCRIPTOR_FIELDS_OFFSET)
        handle.seek(descoff)
        descriptors = handle.read(desclen)
    size = desclen // total if total else 0
    partitions = []
    for start in range(0, total * size, size):
        datatype, used, _, _, _, offset = struct.unpack_from(SIF_DESCRIPTOR_FORMAT, descriptors, start)
        fstype, parttype = struct.unpack_from('<ii', descriptors, start + SIF_PARTITION_EXTRA_OFFSET)
        if used and datatype == SIF_PARTITION_DATATYPE and fstype == SIF_FS_SQUASHFS and \
                parttype in SIF_PARTTYPES_SYSTEM:
            partitions.append((SIF_PARTTYPES_SYSTEM.index(parttype), offset))
    if not partitions:
        raise ValueError("%s has no SquashFS system partition" % path)
    return min(partitions)[1]
