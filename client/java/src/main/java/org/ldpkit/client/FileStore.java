package org.ldpkit.client;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * The documents as files in one folder, {@code <dir>/ldpkit-<name>.json} (the JavaScript
 * client's names: a folder written by either reads in the other). Each write goes to a
 * temporary file in the same folder, is forced to the disk (fsync), then renamed over the
 * document atomically: a crash at any point leaves the previous document or the new one,
 * whole. (The folder itself is not forced: that needs a FileChannel, outside the packages this
 * client uses. A power loss right after a rename may bring back the previous document; a
 * batch sealed before it is then sent again under its id and counted once.)
 *
 * <p>On Android pass {@code context.getFilesDir()} (or a folder under it): the app's
 * private storage. One folder is one device's state: two reporters (two processes) must
 * not share it at once.
 */
public final class FileStore implements Store {
    private final Path dir;

    /** The store in {@code dir} (created, with its parents, if missing). */
    public FileStore(File dir) throws IOException {
        this(dir.toPath());
    }

    /** The store in {@code dir} (created, with its parents, if missing). */
    public FileStore(Path dir) throws IOException {
        if (dir == null) throw new IllegalArgumentException("FileStore needs a folder");
        this.dir = dir;
        Files.createDirectories(dir);
    }

    /** The folder. */
    public Path dir() {
        return dir;
    }

    private Path path(String name) {
        boolean ok = name != null && !name.isEmpty();
        for (int i = 0; ok && i < name.length(); i++) ok = name.charAt(i) >= 'a' && name.charAt(i) <= 'z';
        if (!ok) throw new IllegalArgumentException("not a document name: " + name);
        return dir.resolve("ldpkit-" + name + ".json");
    }

    @Override
    public byte[] read(String name) throws IOException {
        try {
            return Files.readAllBytes(path(name));
        } catch (NoSuchFileException e) {
            return null;
        }
    }

    @Override
    public void write(String name, byte[] data) throws IOException {
        Path target = path(name);
        Path tmp = dir.resolve("ldpkit-" + name + ".json." + Thread.currentThread().getId() + ".tmp");
        FileOutputStream out = new FileOutputStream(tmp.toFile());
        try {
            out.write(data);
            out.flush();
            out.getFD().sync();
        } finally {
            out.close();
        }
        try {
            Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (AtomicMoveNotSupportedException e) {
            Files.deleteIfExists(tmp);
            throw new IOException("the folder " + dir + " cannot rename atomically: choose another", e);
        }
    }

    @Override
    public void close() {}
}
