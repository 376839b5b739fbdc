//! Model of block references.

use super::*;

/// Per block: handles the model knows of, and whether it knows all of them. A block stops being
/// exact once a handle goes where the model cannot follow it: another thread, a chain, or a
/// `Bytes` owner (whose clones and empty slices share or drop the reference as `bytes` sees fit).
#[derive(Clone, Default)]
pub(crate) struct Blocks(pub(crate) Arc<Mutex<Vec<BlockModel>>>);

#[derive(Clone, Copy)]
pub(crate) struct BlockModel {
    pub(crate) handles: usize,
    pub(crate) exact: bool,
}

impl Blocks {
    pub(crate) fn new_block(&self) -> usize {
        let mut blocks = self.0.lock().unwrap();
        blocks.push(BlockModel {
            handles: 0,
            exact: true,
        });
        blocks.len() - 1
    }

    pub(crate) fn get(&self, block: usize) -> BlockModel {
        self.0.lock().unwrap()[block]
    }

    pub(crate) fn make_inexact(&self, block: usize) {
        self.0.lock().unwrap()[block].exact = false;
    }

    /// (blocks the model knows to be live, blocks that may be live).
    pub(crate) fn live_bounds(&self) -> (u64, u64) {
        let blocks = self.0.lock().unwrap();
        let sure = blocks.iter().filter(|b| b.exact && b.handles > 0).count() as u64;
        let maybe = blocks.iter().filter(|b| !b.exact || b.handles > 0).count() as u64;
        (sure, maybe)
    }
}

/// One counted handle to a block, as the model sees it. Dropped after the handle it stands for
/// (it is declared after it in every object), so the model never counts fewer handles than exist.
pub(crate) struct Token {
    pub(crate) block: usize,
    pub(crate) blocks: Blocks,
}

impl Token {
    pub(crate) fn new(blocks: &Blocks, block: usize) -> Token {
        blocks.0.lock().unwrap()[block].handles += 1;
        Token {
            block,
            blocks: blocks.clone(),
        }
    }

    pub(crate) fn another(&self) -> Token {
        Token::new(&self.blocks, self.block)
    }

    pub(crate) fn model(&self) -> BlockModel {
        self.blocks.get(self.block)
    }
}

impl Drop for Token {
    fn drop(&mut self) {
        self.blocks.0.lock().unwrap()[self.block].handles -= 1;
    }
}
